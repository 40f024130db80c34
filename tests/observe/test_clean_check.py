"""observe's stat check on the index the kernel writes (from a tree: no stat recorded)
and on a racy one: content decides, so a same-size edit is found and a clean tree is
clean without asking libgit2; the answer is libgit2's every time."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pygit2
import pytest

from reconciler.kernel.base.config import Identity, LineagePaths
from reconciler.kernel.base.identity import fingerprint
from reconciler.kernel.transaction import lineage, publish
from reconciler.state import worktree
from reconciler.state.observe import observe


@pytest.fixture
def born(tmp_path: Path) -> LineagePaths:
    paths = LineagePaths(tmp_path / "lin", tmp_path / "lin.git", tmp_path / "lin.observations",
                         "lineage-c", "observations/lineage-c", name="c")
    lineage.init_lineage(paths, Identity("https://example.invalid/ouro.git", "main", "5" * 40,
                                         fingerprint()))
    return paths


def _fast(paths: LineagePaths) -> bool:
    repo = pygit2.Repository(str(paths.git_dir))
    head = repo.revparse_single(f"refs/heads/{paths.branch}").peel(pygit2.Commit)
    return worktree.provably_clean(repo, paths.git_dir, paths.worktree, head)


def _libgit2_dirty(paths: LineagePaths) -> bool:
    return bool(pygit2.Repository(str(paths.worktree)).status())


def test_a_kernel_written_index_is_decided_by_content(born: LineagePaths) -> None:
    # the kernel commits an external edit, and sets the index from its tree, as after
    # every generation: the new entry has no stat
    (born.worktree / "notes.txt").write_text("a human's note\n")
    repo = publish.open_lineage(born)
    head = publish.branch_head(repo, born.branch)
    assert head is not None
    commit = publish.create_commit(repo, publish.worktree_tree(repo, born.worktree), head.id,
                                   "external edit")
    publish.cas_ref(repo, born.branch, head.id, commit, "test")
    new = repo[commit]
    assert isinstance(new, pygit2.Commit)
    publish.set_index(repo, new.tree)
    entries, _ = worktree.index_entries((born.git_dir / "index").read_bytes()) or ([], 0)
    assert [e[0] for e in entries if e[1] == e[2] == e[4] == 0] == ["notes.txt"]
    assert _fast(born) and not observe(born).dirty and not _libgit2_dirty(born)
    (born.worktree / "notes.txt").write_text("a human's nope\n")  # same size, no stat
    assert not _fast(born)
    observed = observe(born)
    assert observed.dirty and observed.dirty_paths == ("notes.txt",)
    assert _libgit2_dirty(born)


def test_a_changed_mode_is_found(born: LineagePaths) -> None:
    assert _fast(born)
    os.chmod(born.worktree / "organism.el", 0o755)
    assert not _fast(born)
    assert observe(born).dirty_paths == ("organism.el",) and _libgit2_dirty(born)


def test_a_refreshed_index_is_decided_by_its_stat(born: LineagePaths) -> None:
    then = time.time_ns() - 10_000_000_000
    for path in born.worktree.iterdir():
        if path.name != ".git":
            os.utime(path, ns=(then, then))
    index = pygit2.Repository(str(born.worktree)).index
    index.clear()
    index.add_all()
    index.write_tree()
    index.write()
    assert _fast(born)  # the stat decides
    assert not observe(born).dirty and not _libgit2_dirty(born)
    (born.worktree / "organism.el").write_text("(message \"edited\")\n")
    assert observe(born).dirty_paths == ("organism.el",)
