"""A family of real lineages for the fork tests: a parent grown by a real `ouro apply` of
the offline echo provider, with hand edits between generations (a memory file, an
executable, a symlink) and a death, and the tools to read and tamper with it (git's
objects rewritten with pygit2, as a person rewriting history would)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from tests.apply.helpers import run_ouro, write_spec
from tests.observe.builder import lineage_paths

__all__ = ["Family", "fork_spec", "grow_family", "metadata", "plan_json", "rewrite", "root_tree",
           "seed_entries", "verify"]


@dataclass(frozen=True)
class Family:
    root: Path
    env: dict[str, str]

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def specs(self) -> Path:
        return self.root / "specs"

    def copy(self, target: Path) -> Family:
        shutil.copytree(self.root, target, symlinks=True)
        return Family(target, {**self.env, "OURO_STATE_DIR": str(target / "state")})


def _apply(family: Family, *paths: Path) -> None:
    done = run_ouro("apply", "-y", *map(str, paths), env=family.env)
    assert done.returncode == 0, done.stdout + done.stderr


def grow_family(root: Path) -> Family:
    """scribe: gen 1; hand edits; gen 2 (memory, an executable, a link); a lethal body;
    gen 3 died."""
    family = Family(root, {**os.environ, "OURO_STATE_DIR": str(root / "state")})
    family.specs.mkdir(parents=True)
    spec = write_spec(family.specs, "scribe", 1)
    _apply(family, spec)
    tree = family.state / "scribe"
    (tree / "memory").mkdir()
    (tree / "memory" / "notes.md").write_text("gen 1 learned to keep notes\n")
    (tree / "bin").mkdir()
    (tree / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (tree / "bin" / "run.sh").chmod(0o755)
    (tree / "link").symlink_to("memory/notes.md")
    write_spec(family.specs, "scribe", 2)
    _apply(family, spec)
    (tree / "organism.el").write_text("(kill-emacs 3)\n")
    write_spec(family.specs, "scribe", 3)
    done = run_ouro("apply", "-y", str(spec), env=family.env)
    assert done.returncode == 0, done.stdout + done.stderr
    return family


def fork_spec(folder: Path, name: str, parent: str, generation: int, *,
              generations: int = 1, kernel: str | None = None) -> Path:
    path = write_spec(folder, name, generations)
    extra = f", kernel: {kernel}" if kernel else ""
    path.write_text(path.read_text() + f"  from: {{lineage: {parent}, generation: "
                    f"{generation}{extra}}}\n")
    return path


def plan_json(family: Family, *paths: Path) -> tuple[int, dict[str, Any]]:
    done = run_ouro("plan", "--json", *map(str, paths), env=family.env)
    assert done.returncode in (0, 1, 2), done.stderr
    return done.returncode, json.loads(done.stdout)


def verify(family: Family, *paths: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    done = run_ouro("verify", "--json", *map(str, paths), env=family.env)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    return done.returncode, {item["lineage"]: item for item in report["lineages"]}


def root_tree(family: Family, name: str) -> tuple[pygit2.Repository, pygit2.Commit]:
    paths = lineage_paths(family.state, name)
    repo = pygit2.Repository(str(paths.git_dir))
    commit = repo.references[f"refs/heads/{paths.branch}"].peel(pygit2.Commit)
    while commit.parents:
        commit = commit.parents[0]
    return repo, commit


def _replaced(repo: pygit2.Repository, tree: pygit2.Tree, path: str, data: bytes) -> pygit2.Oid:
    head, _, rest = path.partition("/")
    builder = repo.TreeBuilder(tree)
    if rest:
        sub = repo[tree[head].id]
        assert isinstance(sub, pygit2.Tree)
        builder.insert(head, _replaced(repo, sub, rest, data), pygit2.GIT_FILEMODE_TREE)
    else:
        builder.insert(head, repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
    oid: pygit2.Oid = builder.write()
    return oid


def rewrite(git_dir: Path, branch: str, first: int, path: str, data: bytes) -> str:
    """Rewrite the branch's first-parent history from its ``first``-th commit (0: the
    root) on: ``path`` holds ``data`` in every tree from there. Returns the old head."""
    repo = pygit2.Repository(str(git_dir))
    reference = repo.references[f"refs/heads/{branch}"]
    old = str(reference.target)
    chain = [reference.peel(pygit2.Commit)]
    while chain[-1].parents:
        chain.append(chain[-1].parents[0])
    chain.reverse()
    parent: pygit2.Oid | None = chain[first - 1].id if first else None
    for commit in chain[first:]:
        tree = _replaced(repo, commit.tree, path, data)
        parent = repo.create_commit(None, commit.author, commit.committer, commit.message,
                                    tree, [parent] if parent is not None else [])
    assert parent is not None
    reference.set_target(parent)
    return old


def seed_entries(family: Family, name: str) -> dict[str, tuple[str, int]]:
    _, commit = root_tree(family, name)
    return {str(entry.name): (str(entry.id), entry.filemode) for entry in commit.tree}


def metadata(family: Family, name: str) -> dict[str, Any]:
    _, commit = root_tree(family, name)
    value: dict[str, Any] = json.loads(commit.tree[".ouroboros-lineage.json"].data)
    return value
