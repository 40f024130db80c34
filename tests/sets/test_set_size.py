"""A set's size is bounded before anything is expanded (issue 36, item 2).

The attack: a 16-line LineageSet of 6 matrix keys x 10 values x 10,000 replicas
(10^10 members) made validate and plan grow past 3 GB and end in an internal
error. Run here as the attacker ran it, the ``ouro`` command in a process of its
own, under a 1 GiB address-space limit: it must refuse at FILE:LINE:COL, quickly.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.spec import set_members
from reconciler.spec.load import load_specs
from tests.inprocess import ouro

BOMB = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {name: bomb}
spec:
  replicas: 10000
  matrix:
    ceilings.wall: [61, 62, 63, 64, 65, 66, 67, 68, 69, 70]
    ceilings.cpu: [31, 32, 33, 34, 35, 36, 37, 38, 39, 40]
    ceilings.tasks: [41, 42, 43, 44, 45, 46, 47, 48, 49, 50]
    ceilings.tmp: [1M, 2M, 3M, 4M, 5M, 6M, 7M, 8M, 9M, 10M]
    ceilings.run: [1M, 2M, 3M, 4M, 5M, 6M, 7M, 8M, 9M, 10M]
    ceilings.memory: [1G, 2G, 3G, 4G, 5G, 6G, 7G, 8G, 9G, 10G]
  template:
    generations: 1
    model: {provider: echo}
    ceilings: {worktree: 16M}
"""
SMALL = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {{name: small}}
spec:
  replicas: {replicas}
  matrix:
    ceilings.wall: [61, 62]
  template:
    generations: 1
    model: {{provider: echo}}
"""
GIB = 1 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (GIB, GIB))


@pytest.mark.parametrize("command", [["validate"], ["plan"], ["plan", "--markdown"]],
                         ids=" ".join)
def test_the_16_line_set_is_refused_at_once_within_1_gib(
        tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB.splitlines()) == 16
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli import main; main()", *command,
         str(path), "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=120, check=False, preexec_fn=_limit_memory)
    took = time.monotonic() - started
    assert run.returncode == 1, run.stdout + run.stderr
    assert (f"{path}:6:3: spec.matrix: this set has 10,000,000,000 members (1,000,000 cells "
            "(10 x 10 x 10 x 10 x 10 x 10 matrix values) x 10,000 replicas); a set has at "
            "most 10,000: lower replicas or the matrix, or raise the limit with "
            "--max-set-members N") in run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr
    assert took < 30, f"{took:.1f} s"


def test_replicas_alone_count_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(set_members, "_limit", 2)
    path = tmp_path / "small.yaml"
    path.write_text(SMALL.format(replicas=3).replace("    ceilings.wall: [61, 62]\n", "")
                    .replace("  matrix:\n", ""))
    with pytest.raises(SpecError) as raised:
        load_specs([path], state_dir=tmp_path / "state")
    assert str(raised.value) == (f"{path}:5:13: spec.replicas: this set has 3 members "
                                 "(3 replicas); a set has at most 2: lower replicas or the "
                                 "matrix, or raise the limit with --max-set-members N")


@pytest.mark.parametrize(("replicas", "limit", "ok"),
                         [(3, 6, True), (4, 6, False), (3, 5, False), (1, 2, True)])
def test_the_bound_is_cells_times_replicas(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replicas: int, limit: int,
        ok: bool) -> None:
    monkeypatch.setattr(set_members, "_limit", limit)
    path = tmp_path / "small.yaml"
    path.write_text(SMALL.format(replicas=replicas))
    if ok:
        assert len(load_specs([path], state_dir=tmp_path / "state")) == 2 * replicas
        return
    with pytest.raises(SpecError) as raised:
        load_specs([path], state_dir=tmp_path / "state")
    (problem,) = raised.value.problems
    assert (problem.line, problem.column, problem.field) == (6, 3, "spec.matrix")
    assert f"this set has {2 * replicas} members (2 cells (2 matrix values) x {replicas} " \
        f"replicas); a set has at most {limit}" in problem.message


def test_the_option_raises_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(set_members, "_limit", set_members.DEFAULT_MAX_MEMBERS)
    monkeypatch.setattr(set_members, "DEFAULT_MAX_MEMBERS", 4)  # what a fresh process has
    monkeypatch.setattr(set_members, "_limit", 4)
    path = tmp_path / "small.yaml"
    path.write_text(SMALL.format(replicas=3))
    code, out, err = ouro(monkeypatch, capsys, "validate", path)
    assert code == 1 and "a set has at most 4" in err
    code, out, err = ouro(monkeypatch, capsys, "validate", path, "--max-set-members", "6")
    assert (code, err) == (0, ""), err
    assert out.startswith("ok: 6 lineages in 1 file")
    code, out, err = ouro(monkeypatch, capsys, "validate", path, "--max-set-members", "0")
    assert code == 2 and "--max-set-members" in err
