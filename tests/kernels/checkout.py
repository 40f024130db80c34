"""Real ouro checkouts for pinned-kernel tests: a copy of this source tree in a new git
repository, commits made with git itself, and ouro run from that checkout as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pygit2

REPO_ROOT = Path(__file__).resolve().parents[2]
MAIN = "import sys; from reconciler.cli import main; sys.argv[0] = 'ouro'; main()"
_COPIED = ("reconciler", "README.md", "pyproject.toml", "setup.py")
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "_build_commit.txt")


def git(cwd: Path, *args: str) -> str:
    """Tests make commits and bundles with git itself; ouro never runs git."""
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
        capture_output=True, text=True,
    ).stdout.strip()


def make_checkout(folder: Path, source: Path = REPO_ROOT) -> Path:
    """``folder``: this ouro's files in a fresh repository, committed once (returned)."""
    folder.mkdir(parents=True)
    for name in _COPIED:
        if (source / name).is_dir():
            shutil.copytree(source / name, folder / name, ignore=_IGNORED)
        elif (source / name).exists():
            shutil.copy2(source / name, folder / name)
    (folder / ".gitignore").write_text("__pycache__/\n*.pyc\n*.egg-info/\nbuild/\n")
    git(folder, "init", "-q", "-b", "main")
    commit(folder, "C1: ouro as it is")
    return folder


def commit(checkout: Path, message: str) -> str:
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "--allow-empty", "-m", message)
    return git(checkout, "rev-parse", "HEAD")


def change_kernel(checkout: Path, note: str) -> None:
    """A physics change: the seed organism gains a comment."""
    organism = checkout / "reconciler" / "kernel" / "transaction" / "organism.el"
    organism.write_text(organism.read_text() + f";; {note}\n")


def environment(state: Path, **extra: str) -> dict[str, str]:
    """The user's environment: no instrument override, this state dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OURO_INSTRUMENT")}
    env["OURO_STATE_DIR"] = str(state)
    env.update(extra)
    return env


def ouro(cwd: Path, env: dict[str, str], *args: str,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``ouro ARGS`` from the checkout at ``cwd`` (its ``reconciler`` is the one imported)."""
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def observation(observations: Path, number: int) -> dict[str, Any]:
    repo = pygit2.Repository(str(observations))
    blob = repo.head.peel(pygit2.Commit).tree[f"generations/{number:04d}.json"]
    value: dict[str, Any] = json.loads(blob.data)
    return value


def root_metadata(git_dir: Path, branch: str) -> dict[str, Any]:
    repo = pygit2.Repository(str(git_dir))
    commit = repo.references[f"refs/heads/{branch}"].peel(pygit2.Commit)
    while commit.parents:
        commit = commit.parents[0]
    value: dict[str, Any] = json.loads(commit.tree[".ouroboros-lineage.json"].data)
    return value


def remove_tree(path: Path) -> None:
    """Remove a folder whose entries are read-only (the kernel store's are)."""
    for root, dirs, _ in os.walk(path):
        os.chmod(root, 0o755)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    shutil.rmtree(path)
