"""The worktree check: a read-only stat check (as git's) that falls back to libgit2.

The fast check may only ever say "clean" when libgit2 agrees; anything it cannot
prove goes to libgit2's status, which is exact.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from reconciler.state import worktree
from reconciler.state.observe import observe
from tests.observe.builder import LineageBuilder


def _libgit2_dirty(builder: LineageBuilder) -> bool:
    repo = pygit2.Repository(str(builder.paths.worktree))
    clean = (pygit2.enums.FileStatus.CURRENT, pygit2.enums.FileStatus.IGNORED)
    return any(flags not in clean for flags in repo.status().values())


def _fast(builder: LineageBuilder) -> bool:
    repo = pygit2.Repository(str(builder.paths.git_dir),
                             pygit2.enums.RepositoryOpenFlag.BARE)
    head = repo[repo.references[f"refs/heads/{builder.paths.branch}"].target]
    assert isinstance(head, pygit2.Commit)
    return worktree.provably_clean(repo, builder.paths.git_dir,
                                          builder.paths.worktree, head)


def _write(b: LineageBuilder, name: str, text: str) -> None:
    (b.paths.worktree / name).write_text(text, encoding="utf-8")


def _same_size_same_mtime(b: LineageBuilder) -> None:
    """Racy: content changed, size and mtime kept; only hashing can tell."""
    target = b.paths.worktree / "organism.el"
    info = target.stat()
    data = target.read_bytes()
    target.write_bytes(data[:-2] + b"X\n")
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    index = b.paths.git_dir / "index"
    os.utime(index, ns=(info.st_atime_ns, info.st_mtime_ns))  # entry is racy w.r.t. index


def _staged_only(b: LineageBuilder) -> None:
    (b.paths.worktree / "notes.txt").write_text("staged\n", encoding="utf-8")
    index = b.repo.index
    index.add("notes.txt")
    index.write()


def _ignored_file(b: LineageBuilder) -> None:
    (b.paths.git_dir / "info").mkdir(exist_ok=True)
    (b.paths.git_dir / "info" / "exclude").write_text("*.log\n", encoding="utf-8")
    (b.paths.worktree / "x.log").write_text("ignored\n", encoding="utf-8")


def _chmod_exec(b: LineageBuilder) -> None:
    (b.paths.worktree / "organism.el").chmod(0o755)


def _symlink(b: LineageBuilder) -> None:
    (b.paths.worktree / "link").symlink_to("organism.el")


def _deleted(b: LineageBuilder) -> None:
    (b.paths.worktree / "journal.md").unlink()


def _subfolder_file(b: LineageBuilder) -> None:
    (b.paths.worktree / "sub").mkdir()
    (b.paths.worktree / "sub" / "f.txt").write_text("x\n", encoding="utf-8")


def _git_refreshed_index(b: LineageBuilder) -> None:
    subprocess.run(["git", "-C", str(b.paths.worktree), "status", "--porcelain"],
                   check=True, capture_output=True)


def _tracked_gitattributes(b: LineageBuilder) -> None:
    b._commit({".gitattributes": b"*.el text\n"}, "external edit")


CASES: list[tuple[str, Callable[[LineageBuilder], None], bool]] = [
    ("clean", lambda b: None, False),
    ("clean-after-git-status", _git_refreshed_index, False),
    ("edited", lambda b: _write(b, "organism.el", "(x)\n"), True),
    ("racy-same-size-same-mtime", _same_size_same_mtime, True),
    ("untracked", lambda b: _write(b, "new.txt", "n\n"), True),
    ("untracked-in-subfolder", _subfolder_file, True),
    ("deleted", _deleted, True),
    ("staged-not-committed", _staged_only, True),
    ("ignored-file-only", _ignored_file, False),
    ("tracked-gitattributes", _tracked_gitattributes, False),
    ("mode-change", _chmod_exec, True),
    ("new-symlink", _symlink, True),
]


@pytest.mark.parametrize(("state", "change", "dirty"), CASES, ids=[c[0] for c in CASES])
def test_dirty_agrees_with_libgit2(tmp_path: Path, state: str,
                                   change: Callable[[LineageBuilder], None], dirty: bool) -> None:
    builder = LineageBuilder(tmp_path)
    builder.gen("changed")
    builder.external_edit()
    change(builder)
    assert _libgit2_dirty(builder) == dirty
    assert observe(builder.paths).dirty == dirty
    if dirty:
        assert not _fast(builder), "the fast check must never call a dirty worktree clean"


def test_fast_check_proves_a_fresh_lineage_clean(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path)
    builder.gen("changed")
    (builder.paths.worktree / "sub").mkdir()
    builder._commit({"sub/f.txt": b"x\n"}, "external edit")
    assert _fast(builder)


def test_fast_check_does_not_write(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path)
    builder.gen()
    index = builder.paths.git_dir / "index"
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    _fast(builder)
    observe(builder.paths)
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
