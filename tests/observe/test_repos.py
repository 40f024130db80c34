"""state.repos, the one reader of a lineage's two repositories: what is absent is None or
``Absent``, what does not read is ``Unreadable`` (a StateError), and a branch whose newest
commit added an object that does not read whole is refused before libgit2 reads it."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from reconciler.errors import StateError
from reconciler.kernel.base.config import METADATA_FILE
from reconciler.state.repos import (
    Absent,
    Lineage,
    NewestUnreadable,
    Unreadable,
    observation_name,
    open_repo,
)
from tests.observe.builder import LineageBuilder


def _truncate(store: Path, oid: pygit2.Oid) -> None:
    loose = store / "objects" / str(oid)[:2] / str(oid)[2:]
    data = loose.read_bytes()
    loose.chmod(0o644)
    loose.write_bytes(data[: len(data) // 2])


def test_observations_by_number_and_the_root(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path)
    first = builder.gen("changed")
    builder.gen()
    lineage = Lineage(builder.paths)
    record = lineage.observation(1)
    assert record is not None and record["lineage_commit"] == first
    assert lineage.observation(3) is None and lineage.observation(0) is None
    assert lineage.root_metadata() == (builder.seed, builder.lineage_metadata())
    assert observation_name(12) == "0012.json"
    repo = lineage.lineage
    head = lineage.lineage_head()
    assert repo is not None and head is not None and str(head.id) == builder.head
    assert [str(c.id) for c in repo.first_parents(head)][-1] == builder.seed


def test_absent_and_unreadable_are_told_apart(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path)
    builder.hand_commit("hand: not json", name="notes.json")
    repo, head = open_repo(builder.paths.git_dir, bare=True), Lineage(builder.paths)
    commit = head.lineage_head()
    assert repo is not None and commit is not None
    assert repo.json(repo.root(commit).tree, METADATA_FILE) == builder.lineage_metadata()
    with pytest.raises(Absent):
        repo.json(commit.tree, "missing.json")
    with pytest.raises(Unreadable) as unreadable:
        repo.json(commit.tree, "notes.json")
    assert isinstance(unreadable.value, StateError) and "notes.json" in str(unreadable.value)
    assert repo.json_or_none(commit.tree, "notes.json") is None
    assert open_repo(tmp_path / "nothing") is None and repo.head("no-such-branch") is None


def test_a_truncated_newest_object_is_refused_before_libgit2_reads_it(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path)
    builder.gen()
    head = builder.repo.get(builder.head)
    assert isinstance(head, pygit2.Commit)
    journal = head.tree["journal.md"].id
    _truncate(builder.paths.git_dir, journal)
    lineage = Lineage(builder.paths)
    with pytest.raises(NewestUnreadable) as refused:
        lineage.lineage_head()
    assert str(journal) in str(refused.value) and "does not read whole" in str(refused.value)
    assert lineage.observation(1) is not None  # the observations still read
