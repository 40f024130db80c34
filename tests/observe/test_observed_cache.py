"""observe's cache (state.observed_cache): an in-sync lineage is observed again from its
record while its refs are unchanged; what is not in the objects (the worktree, the
marker, ref locks) is read every time, and a record that moved, was forged or is
damaged is never believed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from reconciler.state.observe import observe
from tests.observe.builder import LineageBuilder
from tests.observe.spies import no_reading


def _in_sync(tmp_path: Path) -> LineageBuilder:
    builder = LineageBuilder(tmp_path)
    builder.gen("changed")
    builder.gen("died")
    builder.checkout()
    return builder


def test_an_unchanged_lineage_is_observed_from_its_record(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = _in_sync(tmp_path)
    read = observe(builder.paths, cache)
    assert read == observe(builder.paths) and read.generations == 2 and not read.problems
    assert len(list(cache.glob("*.observed.json"))) == 1
    no_reading(monkeypatch)
    assert observe(builder.paths, cache) == read


def test_a_moved_head_is_read_again(tmp_path: Path, cache: Path) -> None:
    builder = _in_sync(tmp_path)
    observe(builder.paths, cache)
    builder.gen(move_branch=False)  # the observation branch alone moves: a roll-forward
    seen = observe(builder.paths, cache)
    assert seen.interrupted is not None and seen.interrupted.kind == "roll-forward"
    builder.gen()
    builder.checkout()
    seen = observe(builder.paths, cache)
    assert seen.generations == 3 and seen.lineage_head == builder.head
    assert seen == observe(builder.paths)


def test_the_worktree_and_the_marker_are_read_every_time(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = _in_sync(tmp_path)
    observe(builder.paths, cache)
    (builder.paths.worktree / "organism.el").write_text("(hand edit)\n", encoding="utf-8")
    with monkeypatch.context() as patched:
        no_reading(patched)
        seen = observe(builder.paths, cache)  # the record holds: only the worktree is read
    assert seen.dirty and seen.dirty_paths == ("organism.el",)
    builder.write_marker()  # a marker: the lineage is read in full
    seen = observe(builder.paths, cache)
    assert seen == observe(builder.paths) and seen.interrupted is not None


@pytest.mark.parametrize("damage", ["forged", "rehashed", "truncated", "other-lineage"])
def test_a_record_that_does_not_check_is_not_believed(
        tmp_path: Path, cache: Path, damage: str) -> None:
    builder = _in_sync(tmp_path)
    observe(builder.paths, cache)
    (record,) = cache.glob("*.observed.json")
    header, body = record.read_bytes().split(b"\n", 1)
    if damage == "forged":  # the body says 7 generations; the header still seals the old one
        record.write_bytes(header + b"\n" + body.replace(b'"generations":2', b'"generations":7'))
    elif damage == "rehashed":  # forged and its digest made again, without the state's key
        forged = body.replace(b'"generations":2', b'"generations":7')
        fields = json.loads(header)
        fields["body_sha256"] = hashlib.sha256(forged).hexdigest()
        record.write_bytes(json.dumps(fields).encode() + b"\n" + forged)
    elif damage == "truncated":
        record.write_bytes(header + b"\n" + body[: len(body) // 2])
    else:  # another lineage's record under this name: its key differs
        other = LineageBuilder(tmp_path, "beta")
        other.gen()
        other.checkout()
        observe(other.paths, cache)
        (theirs,) = (p for p in cache.glob("*.observed.json") if p != record)
        record.write_bytes(theirs.read_bytes())
    seen = observe(builder.paths, cache)
    assert seen.generations == 2 and seen == observe(builder.paths)


def test_a_lineage_with_a_problem_is_not_kept(tmp_path: Path, cache: Path) -> None:
    builder = _in_sync(tmp_path)
    builder.gen(move_branch=False)  # a roll-forward is pending: interrupted, not kept
    assert observe(builder.paths, cache).interrupted is not None
    assert not list(cache.glob("*.observed.json"))


def test_no_state_dir_is_made_for_a_record(tmp_path: Path) -> None:
    builder = _in_sync(tmp_path)
    observe(builder.paths, tmp_path / "nowhere" / ".summaries")
    assert not (tmp_path / "nowhere").exists()
