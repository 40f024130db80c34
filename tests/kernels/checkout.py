"""Real ouro checkouts for pinned-kernel tests: a copy of this source tree (or of its tree
at an older revision) in a new git repository, commits made with git itself, and ouro run
from that checkout as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from tests.host import require

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


def source_at(revision: str, folder: Path) -> bool:
    """Write this repository's tree at ``revision`` into ``folder`` (git archive); False
    where there is no git history to read it from."""
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        return False
    found = subprocess.run(["git", "-C", str(REPO_ROOT), "cat-file", "-e",
                            f"{revision}^{{commit}}"], capture_output=True, check=False)
    if found.returncode != 0:
        return False
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", revision],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return True


def replace_source(checkout: Path, source: Path = REPO_ROOT) -> None:
    """The checkout's ouro becomes ``source``'s (its reconciler and pyproject): a release
    lands in it, to be committed."""
    shutil.rmtree(checkout / "reconciler")
    shutil.copytree(source / "reconciler", checkout / "reconciler", ignore=_IGNORED)
    shutil.copy2(source / "pyproject.toml", checkout / "pyproject.toml")


@dataclass(frozen=True)
class Workspace:
    """A checkout of ouro (its first commit ``c1``), a state dir, the user's environment
    for it, and a specs folder."""

    checkout: Path
    c1: str
    state: Path
    env: dict[str, str]
    specs: Path


def workspace(tmp_path: Path, source: Path = REPO_ROOT) -> Workspace:
    """A ``Workspace`` under ``tmp_path`` whose checkout is a copy of ``source``."""
    require(shutil.which("bwrap") is not None and shutil.which("git") is not None,
            "needs bubblewrap and git")
    checkout = make_checkout(tmp_path / "ouro", source=source)
    state = tmp_path / "state"
    specs = tmp_path / "specs"
    specs.mkdir()
    return Workspace(checkout, git(checkout, "rev-parse", "HEAD"), state, environment(state),
                     specs)


def apply_json(checkout: Path, env: dict[str, str], specs: Path) -> None:
    """``ouro apply --yes --json --parallel 2 SPECS`` from ``checkout``, which must succeed."""
    done = ouro(checkout, env, "apply", "--yes", "--json", "--parallel", "2", str(specs))
    assert done.returncode == 0, done.stdout + done.stderr


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
