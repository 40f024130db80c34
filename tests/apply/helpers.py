"""Running `ouro` as a user would (a real process), and checking the lineage invariant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pygit2

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import LineagePaths
from reconciler.state.audit import audit_lineage

REPO_ROOT = Path(__file__).resolve().parents[2]
MAIN = "import sys; from reconciler.cli import main; sys.argv[0] = 'ouro'; main()"

# An organism that changes nothing and lives: the smallest healthy body.
QUIET_BODY = '(message "quiet life")\n'


def ouro_argv(*args: str) -> list[str]:
    return [sys.executable, "-c", MAIN, *args]


def run_ouro(*args: str, env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(ouro_argv(*args), cwd=REPO_ROOT, env=env or dict(os.environ),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def write_spec(folder: Path, name: str, generations: int, *, provider: str = "echo",
               replay: str | None = None, extra_model: str = "", storage: str = "") -> Path:
    model = [f"provider: {provider}"]
    if replay is not None:
        model.append(f"replay: {replay}")
    model += [line.strip() for line in extra_model.strip().splitlines() if line.strip()]
    lines = [
        "apiVersion: ouro/v1",
        "kind: Lineage",
        "metadata:",
        f"  name: {name}",
        "spec:",
        f"  generations: {generations}",
        "  model:",
        *(f"    {line}" for line in model),
        "  ceilings:",
        "    wall: 60s",
        "    cpu: 30s",
        "    memory: 512MiB",
    ]
    if storage:
        lines += ["  storage:", f"    path: {storage}"]
    text = "\n".join(lines) + "\n"
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


# A reply no life asks for, after an organism's that asks for nothing: apply runs a replay
# generation only while the folder has a reply left for it (plan.continuation)
UNASKED = ";; a reply no life asks for: it keeps a reply left for the next generation\n"


def write_replies(folder: Path, bodies: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for index, body in enumerate(bodies, start=1):
        (folder / f"{index:04d}.el").write_text(body)
    return folder


def generation_subjects(paths: LineagePaths) -> list[str]:
    repo = pygit2.Repository(str(paths.git_dir))
    head = repo.references[f"refs/heads/{paths.branch}"].peel(pygit2.Commit)
    subjects = []
    commit: pygit2.Commit | None = head
    while commit is not None:
        subjects.append(commit.message.split("\n", 1)[0])
        commit = commit.parents[0] if commit.parents else None
    return [s for s in reversed(subjects) if formats.is_generation_subject(s)]


def observation_numbers(paths: LineagePaths) -> list[int]:
    folder = paths.observations / "generations"
    return sorted(int(p.stem) for p in folder.glob("*.json")) if folder.is_dir() else []


def assert_invariant(paths: LineagePaths, generations: int) -> None:
    """N generation commits, N observations, each naming its commit; the audit agrees."""
    subjects = generation_subjects(paths)
    assert len(subjects) == generations, subjects
    assert observation_numbers(paths) == list(range(1, generations + 1))
    audit = audit_lineage(paths)
    assert audit.status == "consistent", audit
    assert audit.generations == generations


def refs(paths: LineagePaths) -> dict[str, str]:
    found = {}
    for place in (paths.git_dir, paths.observations):
        repo = pygit2.Repository(str(place))
        for name in repo.references:
            found[f"{place.name}:{name}"] = str(repo.references[name].target)
    return found


def report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(result.stdout)
    return document
