"""An in-sync lineage whose record holds is observed without opening its repositories:
its refs are read from their files (``repos.refs_from_files``, only where that is what
libgit2 reads), and its worktree is checked against the head's tree listing the record
keeps. Whatever the files cannot tell beyond doubt goes to libgit2, and a repository
whose config or owner changed is observed in full."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2
import pytest

from reconciler.state import repos
from reconciler.state.observe import observe
from reconciler.state.repos import Lineage, refs_from_files
from tests.observe.builder import LineageBuilder
from tests.observe.spies import count_opens, no_reading


def _in_sync(root: Path) -> LineageBuilder:
    builder = LineageBuilder(root)
    builder.gen("changed")
    builder.gen()
    builder.checkout()
    return builder


def _libgit2(git_dir: Path, branches: tuple[str, ...]) -> tuple[str | None, tuple[str | None, ...]]:
    repo = repos.open_repo(git_dir, bare=True)
    assert repo is not None
    ids = tuple(str(found) if (found := repo.head_id(b)) is not None else None
                for b in branches)
    return repo.head_branch(), ids


def test_ref_files_say_what_libgit2_reads(tmp_path: Path) -> None:
    builder = _in_sync(tmp_path)
    git_dir = builder.paths.git_dir
    branches = (builder.paths.branch, "absent", "feature/x")
    builder.repo.references.create("refs/heads/feature/x", builder.head)
    fast = refs_from_files(str(git_dir), branches)
    assert fast is not None and fast == _libgit2(git_dir, branches)
    assert fast[0] == builder.paths.branch and fast[1][0] == builder.head
    builder.repo.set_head(pygit2.Oid(hex=builder.head))  # detached
    assert refs_from_files(str(git_dir), branches) == _libgit2(git_dir, branches)
    assert _libgit2(git_dir, branches)[0] is None


@pytest.mark.parametrize("case", ["packed", "symbolic", "odd-name", "commondir", "link",
                                  "no-objects", "garbage"])
def test_what_the_files_cannot_tell_goes_to_libgit2(tmp_path: Path, case: str) -> None:
    builder = _in_sync(tmp_path)
    git_dir = builder.paths.git_dir
    branch = builder.paths.branch
    ref = git_dir / "refs" / "heads" / branch
    branches: tuple[str, ...] = (branch, "absent")
    if case == "packed":  # an absent ref file may be a packed ref
        subprocess.run(["git", "--git-dir", str(git_dir), "pack-refs", "--all"], check=True)
    elif case == "symbolic":
        ref.write_text("ref: refs/heads/other\n", encoding="utf-8")
    elif case == "odd-name":
        branches = (branch, "a..b")
    elif case == "commondir":
        (git_dir / "commondir").write_text("..\n", encoding="utf-8")
    elif case == "link":
        target = git_dir / "elsewhere"
        target.write_text(builder.head + "\n", encoding="utf-8")
        ref.unlink()
        ref.symlink_to(target)
    elif case == "no-objects":
        os.rename(git_dir / "objects", git_dir / "objects.away")
    else:
        ref.write_text(builder.head.upper() + "\n", encoding="utf-8")
    assert refs_from_files(str(git_dir), branches) is None


def test_an_in_sync_lineage_is_observed_without_opening_a_repository(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = _in_sync(tmp_path)
    first = observe(builder.paths, cache)
    with monkeypatch.context() as patched:
        opened = count_opens(patched)
        no_reading(patched)
        assert observe(builder.paths, cache) == first
    assert opened == [] and not first.dirty and not first.problems


def test_an_index_of_another_tree_is_not_clean(tmp_path: Path, cache: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A change staged (index and worktree agree, the head does not): dirty, though every
    file's stat matches the index."""
    builder = _in_sync(tmp_path)
    observe(builder.paths, cache)
    (builder.paths.worktree / "organism.el").write_text("(staged)\n", encoding="utf-8")
    index = builder.repo.index
    index.read()
    index.add("organism.el")
    index.write()
    no_reading(monkeypatch)  # the record still holds: only the worktree is read again
    seen = observe(builder.paths, cache)
    assert seen.dirty and seen.dirty_paths == ("organism.el",)


@pytest.mark.parametrize("place", ["git_dir", "observations"])
def test_a_changed_config_is_read_in_full(tmp_path: Path, cache: Path, place: str) -> None:
    builder = _in_sync(tmp_path)
    observe(builder.paths, cache)
    git_dir = (builder.paths.git_dir if place == "git_dir"
               else builder.paths.observations / ".git")
    (git_dir / "config").write_text("[core\n\tbroken", encoding="utf-8")
    seen = observe(builder.paths, cache)
    assert seen == observe(builder.paths)
    assert "not-a-lineage" in [p.code for p in seen.problems]


def test_the_lineage_reader_answers_alike_either_way(tmp_path: Path) -> None:
    builder = _in_sync(tmp_path)
    lineage = Lineage(builder.paths)
    branches = (builder.paths.observation_branch, "probes/x")
    fast = lineage.refs("observations", branches)
    git_dir = builder.paths.observations / ".git"
    subprocess.run(["git", "--git-dir", str(git_dir), "pack-refs", "--all"], check=True)
    assert lineage.refs("observations", branches) == fast  # now through libgit2
    assert fast[0] == builder.paths.observation_branch and fast[1][1] is None


@pytest.mark.parametrize("place", ["git_dir", "observations"])
def test_a_ref_lock_left_behind_is_read_in_full(tmp_path: Path, cache: Path,
                                                place: str) -> None:
    builder = _in_sync(tmp_path)
    observe(builder.paths, cache)
    if place == "git_dir":
        lock = builder.paths.git_dir / "refs" / "heads" / f"{builder.paths.branch}.lock"
    else:
        lock = (builder.paths.observations / ".git" / "refs" / "heads"
                / f"{builder.paths.observation_branch}.lock")
    lock.write_text("", encoding="utf-8")
    seen = observe(builder.paths, cache)
    assert seen == observe(builder.paths)
    assert [p.message for p in seen.problems if p.code == "damaged"] == [
        f"{lock} was left behind by a git command"]


def test_a_records_heads_are_every_field(tmp_path: Path) -> None:
    import dataclasses

    from reconciler.state import observed_cache

    builder = _in_sync(tmp_path)
    found = observed_cache.heads(builder.paths, Lineage(builder.paths))
    assert observed_cache._fields(found) == dataclasses.asdict(found)
    assert found.lineage_config is not None and found.observation_config is not None


def test_the_ref_lock_check_asks_of_exactly_the_files_the_kernel_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """observe's first look for leftover ref locks (by string, every lineage of a fleet)
    copies the kernel's ``ref_locks`` rule, which it cannot import cheaply: the two ask
    of the same files, so a lock the kernel would name is never missed."""
    import os

    from reconciler.kernel.transaction import publish
    from reconciler.state import observe as observing

    builder = _in_sync(tmp_path)
    asked: list[str] = []
    real = os.path.lexists

    def lexists(path: str | os.PathLike[str]) -> bool:
        asked.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(os.path, "lexists", lexists)
    assert publish.ref_locks(builder.paths) == []
    by_the_kernel = sorted(asked)
    asked.clear()
    assert observing._any_ref_lock(builder.paths) is False
    assert sorted(os.path.normpath(path) for path in asked) == by_the_kernel
