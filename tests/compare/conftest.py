"""A real set of two cells x three replicas that differ by construction, grown once.

Each cell's replay folder answers every generation with the seed organism grown by a
known amount (``STEPS`` bytes a generation), after a form that writes a random
``noise.txt`` (under 400 bytes) and a binary ``blob.bin``: the organism's size is known
exactly, the size probe's value (organism plus noise) varies between replicas. The set
is applied with 2 generations, then raised to 3 with one member of the small cell left
out: it stopped at generation 2.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.apply.helpers import REPO_ROOT, run_ouro

SEED = (REPO_ROOT / "reconciler/kernel/transaction/organism.el").read_bytes()
NOISE = (b'(random t)\n'
         b'(with-temp-file "/work/noise.txt" (insert (make-string (random 400) ?x)))\n'
         b"(let ((coding-system-for-write 'binary))\n"
         b'  (with-temp-file "/work/blob.bin" (set-buffer-multibyte nil)\n'
         b'    (insert (unibyte-string 0 200 255 13 10 0 1 127))))\n')
STEPS = {"small": 100, "large": 1000}
SET = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {{name: grow}}
spec:
  replicas: 3
  matrix:
    model:
      - {{provider: replay, replay: replies/small}}
      - {{provider: replay, replay: replies/large}}
  template:
    generations: {generations}
    ceilings: {{wall: 60s, cpu: 30s, memory: 512MiB}}
    probes:
      - name: size
        run: [/bin/sh, /probe/size.sh]
        files: probes/size
        ceilings: {{wall: 20s, cpu: 5s, memory: 256MiB}}
"""
SIZE = 'printf \'{"bytes": %d}\' "$(cat organism.el noise.txt 2>/dev/null | wc -c)"\n'


def organism_bytes(cell: str, generation: int) -> int:
    """organism.el's size at a generation, by construction."""
    return len(SEED) if generation == 0 else (
        len(NOISE) + len(SEED) + generation * STEPS[cell] + 1)


@dataclass(frozen=True)
class Grown:
    spec: Path
    env: dict[str, str]
    state: Path
    members: dict[str, list[str]]  # cell -> member names, by replica
    stopped: str  # the member left at generation 2

    def git_dir(self, name: str) -> Path:
        return self.state / f"{name}.git"

    def commits(self, name: str) -> dict[int, str]:
        """generation -> commit, read with git itself (0: the root, the seed)."""
        out = subprocess.run(
            ["git", "--git-dir", str(self.git_dir(name)), "log", "--first-parent",
             "--format=%H %s", f"lineage-{name}"],
            check=True, capture_output=True, text=True).stdout.splitlines()
        found = {}
        for line in out:
            commit, subject = line.split(" ", 1)
            if subject == "seed":
                found[0] = commit
            elif subject.startswith("gen "):
                found[int(subject.split()[1].rstrip(":"))] = commit
        return found

    def git_show(self, name: str, commit: str, path: str) -> bytes:
        return subprocess.run(["git", "--git-dir", str(self.git_dir(name)), "show",
                               f"{commit}:{path}"], check=True, capture_output=True).stdout

    def probe_bytes(self, name: str, generation: int) -> int:
        """The size probe's value, recomputed from the tree with git: organism + noise."""
        commit = self.commits(name)[generation]
        organism = len(self.git_show(name, commit, "organism.el"))
        listed = subprocess.run(["git", "--git-dir", str(self.git_dir(name)), "ls-tree",
                                 "--name-only", commit], check=True, capture_output=True,
                                text=True).stdout.split()
        noise = len(self.git_show(name, commit, "noise.txt")) if "noise.txt" in listed else 0
        return organism + noise


def _apply(env: dict[str, str], spec: Path, *select: str) -> None:
    result = run_ouro("apply", "--yes", "--parallel", "2", *select, str(spec), env=env)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="package")
def grown(tmp_path_factory: pytest.TempPathFactory) -> Grown:
    root = tmp_path_factory.mktemp("grow")
    specs = root / "specs"
    (specs / "probes" / "size").mkdir(parents=True)
    (specs / "probes" / "size" / "size.sh").write_text(SIZE)
    for cell, step in STEPS.items():
        folder = specs / "replies" / cell
        folder.mkdir(parents=True)
        for k in (1, 2, 3):
            (folder / f"{k:04d}.el").write_bytes(NOISE + SEED + b";" * (k * step) + b"\n")
    spec = specs / "grow.yaml"
    spec.write_text(SET.format(generations=2))
    env = {**os.environ, "OURO_STATE_DIR": str(root / "state")}
    _apply(env, spec)
    spec.write_text(SET.format(generations=3))
    _apply(env, spec, "-l", "ouro/replica in (0,1)", "-l", "ouro/model=replay-replies-large")
    state = root / "state"
    members = {cell: sorted(path.name for path in state.iterdir() if path.is_dir()
                            and path.name.startswith(f"grow-replay-replies-{cell}-")
                            and not path.name.endswith((".git", ".observations")))
               for cell in STEPS}
    assert [len(found) for found in members.values()] == [3, 3], members
    return Grown(spec, env, state, members, members["small"][2])
