"""observe's cache (state.observed_cache): an in-sync lineage is observed again from its
record while its refs are unchanged; what is not in the objects (the worktree, the
marker, ref locks) is read every time, and a record that moved, was forged or is
damaged is never believed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconciler.state import cachefile
from reconciler.state.cachefile import cache_seal, one_seal
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


def _resealed(record: Path, cache: Path,
              edit: Callable[[dict[str, Any], bytes], bytes]) -> None:
    """Rewrite ``record``'s body and constraints through ``edit`` and seal it again with the
    state dir's own key: a record only ouro could have written (what a bug, not a forger,
    would make)."""
    header, body, constraints = record.read_bytes().split(b"\n")
    fields, document = json.loads(header), json.loads(body)
    constraints = edit(document, constraints)
    data = json.dumps(document).encode() + b"\n" + constraints
    fields["body_sha256"] = hashlib.sha256(data).hexdigest()
    seal = cache_seal(cache, create=False)
    assert seal is not None
    record.write_bytes(json.dumps(seal.sealed(fields)).encode() + b"\n" + data)


def test_the_constraints_come_back_whole_and_in_place(tmp_path: Path, cache: Path) -> None:
    builder = _in_sync(tmp_path)
    fresh = observe(builder.paths, cache)
    assert fresh.last_observation and isinstance(fresh.last_observation["constraints"], dict)
    (record,) = cache.glob("*.observed.json")
    _, body, constraints = record.read_bytes().split(b"\n")
    assert json.loads(body)["last_observation"]["constraints"] is None  # on a line of their own
    assert json.loads(constraints) == fresh.last_observation["constraints"]
    recalled = observe(builder.paths, cache).last_observation
    assert recalled == fresh.last_observation
    assert list(recalled) == list(fresh.last_observation)  # the same keys in the same order
    assert json.dumps(recalled) == json.dumps(fresh.last_observation)


def test_lineages_of_one_manifest_share_its_parsed_constraints(
        tmp_path: Path, cache: Path) -> None:
    first, second = (_in_sync(tmp_path / name) for name in ("one", "two"))
    for builder in (first, second):
        observe(builder.paths, cache)
    one, two = (observe(builder.paths, cache).last_observation for builder in (first, second))
    assert one is not None and two is not None and one is not two
    assert one["constraints"] is two["constraints"]  # parsed once for the process


@pytest.mark.parametrize("damage", ["no-place", "not-json", "observation-list",
                                    "a-fourth-line"])
def test_a_record_whose_constraints_do_not_fit_is_not_believed(
        tmp_path: Path, cache: Path, damage: str) -> None:
    builder = _in_sync(tmp_path)
    fresh = observe(builder.paths, cache)
    (record,) = cache.glob("*.observed.json")

    def edit(body: dict[str, Any], constraints: bytes) -> bytes:
        if damage == "no-place":  # the text, and no null where it goes
            del body["last_observation"]["constraints"]
        elif damage == "not-json":
            return b"{not json"
        elif damage == "observation-list":
            body["last_observation"] = [body["last_observation"]]
        else:
            return constraints + b"\n{}"
        return constraints

    _resealed(record, cache, edit)
    seen = observe(builder.paths, cache)  # read in full again, and kept again
    assert seen == fresh and seen.last_observation == fresh.last_observation
    _, body, constraints = record.read_bytes().split(b"\n")
    assert json.loads(body)["last_observation"]["constraints"] is None
    assert json.loads(constraints) == fresh.last_observation["constraints"]


def test_one_pass_reads_the_seal_once(tmp_path: Path, cache: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    builders = [_in_sync(tmp_path / f"l{index}") for index in range(3)]
    reads: list[Path] = []  # the key read (a key not there yet is no read)
    real = cachefile._read_key

    def read_key(path: Path) -> bytes:
        key = real(path)
        reads.append(path)
        return key

    monkeypatch.setattr(cachefile, "_read_key", read_key)
    with one_seal(cache):  # no key yet: the first record makes it, and it is kept
        first = [observe(builder.paths, cache) for builder in builders]
    assert len(reads) == 1 and len(list(cache.glob("*.observed.json"))) == 3
    reads.clear()
    with one_seal(cache):
        assert [observe(builder.paths, cache) for builder in builders] == first
    assert len(reads) == 1
    reads.clear()
    assert [observe(builder.paths, cache) for builder in builders] == first
    assert len(reads) == 3  # outside a pass: read each time


def test_a_pass_over_another_folder_leaves_this_one_alone(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = _in_sync(tmp_path)
    other = tmp_path / "other" / ".summaries"
    other.parent.mkdir(mode=0o700)
    assert cache_seal(other, create=True) is not None  # another state dir, its own key
    with one_seal(other):
        read = observe(builder.paths, cache)  # kept under this state dir's key
    assert (cache.parent / cachefile.KEY_FILE).read_bytes() != (
        other.parent / cachefile.KEY_FILE).read_bytes()
    no_reading(monkeypatch)
    assert observe(builder.paths, cache) == read  # believed: sealed with its own key
