"""engine.halves: the second half of a large map runs in a forked child, and the answer
is always the serial one: a child that raises, dies or answers nonsense has its half
mapped here; an error is raised here, by its item; the child is always reaped."""

from __future__ import annotations

import errno
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler.engine import halves
from reconciler.engine.fleet import Fleet
from reconciler.engine.halves import map_halves
from reconciler.spec.load import LoadedSpec
from tests.host import Children
from tests.observe.builder import TEST_IDENTITY, LineageBuilder

PARENT = os.getpid()
_ALONE = halves._alone


@pytest.fixture(autouse=True)
def _two_cores_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cores, and no other thread (whatever this host's allotment, and whatever threads
    other tests left in this worker: the children here only compute and exit)."""
    monkeypatch.setattr(halves, "_cores", lambda: 2)
    monkeypatch.setattr(halves, "_alone", lambda: True)


def _where(item: int) -> tuple[int, int]:
    return item * item, os.getpid()


def test_the_second_half_runs_in_a_child_and_the_order_is_kept(new_children: Children) -> None:
    found = map_halves(_where, list(range(100)), min_items=10)
    assert [value for value, _ in found] == [item * item for item in range(100)]
    pids = [pid for _, pid in found]
    assert set(pids[:50]) == {PARENT} and len(set(pids[50:])) == 1 and pids[50] != PARENT
    assert not new_children()


@pytest.mark.parametrize("size", [0, 1, 9])
def test_a_small_map_is_not_split(size: int) -> None:
    found = map_halves(_where, list(range(size)), min_items=10)
    assert found == [(item * item, PARENT) for item in range(size)]


def test_with_another_thread_running_nothing_is_forked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(halves, "_alone", _ALONE)  # the real question
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        found = map_halves(_where, list(range(20)), min_items=10)
    finally:
        stop.set()
        other.join()
    assert {pid for _, pid in found} == {PARENT}


def test_on_one_core_nothing_is_forked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(halves, "_cores", lambda: 1)
    assert {pid for _, pid in map_halves(_where, list(range(20)), min_items=10)} == {PARENT}


def _in_child(action: Callable[[], object]) -> Callable[[int], tuple[int, int]]:
    def function(item: int) -> tuple[int, int]:
        if os.getpid() != PARENT:
            action()
        return _where(item)
    return function


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _raise() -> None:
    raise RuntimeError("only in the child")


def _exit_zero() -> object:
    raise SystemExit(0)  # an exit the child's own code did not choose: its half is redone


@pytest.mark.parametrize("action", [_kill_self, _raise, _exit_zero],
                         ids=["killed", "raises", "exits"])
def test_a_child_that_fails_has_its_half_mapped_here(
        action: Callable[[], object], new_children: Children) -> None:
    found = map_halves(_in_child(action), list(range(20)), min_items=10)
    assert found == [(item * item, PARENT) for item in range(20)]
    assert not new_children()


def test_results_that_do_not_pickle_are_mapped_here() -> None:
    def function(item: int) -> object:
        return (lambda: item) if os.getpid() != PARENT else item  # a lambda: no pickle

    found = map_halves(function, list(range(20)), min_items=10)
    assert found == list(range(20))


def test_an_error_of_this_half_is_raised_and_the_child_killed_and_reaped(
        new_children: Children) -> None:
    started = os.getpid()

    def function(item: int) -> int:
        if os.getpid() != started:
            time.sleep(120)  # the child would not finish in time: it must be killed
        if item == 3:
            raise ValueError("item 3")
        return item

    began = time.monotonic()
    with pytest.raises(ValueError, match="item 3"):
        map_halves(function, list(range(20)), min_items=10)
    assert time.monotonic() - began < 60 and not new_children()


def test_an_error_of_the_childs_half_is_raised_here_by_its_item(new_children: Children) -> None:
    def function(item: int) -> int:
        if item == 15:
            raise KeyError(item)
        return item

    with pytest.raises(KeyError):
        map_halves(function, list(range(20)), min_items=10)
    assert not new_children()


@pytest.fixture
def few_halves(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Fleets of 4 and more are observed in halves; the pids the second halves ran in."""
    real = halves.map_halves
    pids: list[int] = []

    def split(function: Callable[[object], object], items: list[object],
              **_: object) -> list[object]:
        found = real(lambda item: (function(item), os.getpid()), items, min_items=4)
        pids.extend(pid for _, pid in found)
        return [value for value, _ in found]

    monkeypatch.setattr(halves, "map_halves", split)
    yield pids


def _six_lineages(tmp_path: Path) -> tuple[Fleet, list[LoadedSpec]]:
    """Six lineages of 0, 1, 2, 0, 1, 2 generations, their specs asking for 3."""
    from reconciler.spec.load import load_specs

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    specs = tmp_path / "specs"
    specs.mkdir()
    for index in range(6):
        builder = LineageBuilder(tmp_path / "lineages", name=f"l{index}")
        for _ in range(index % 3):
            builder.gen("changed")
        builder.checkout()
        (specs / f"l{index}.yaml").write_text(
            "apiVersion: ouro/v1\nkind: Lineage\n"
            f"metadata: {{name: l{index}}}\n"
            f"spec:\n  generations: 3\n  model: {{provider: echo}}\n"
            f"  storage: {{path: {builder.paths.worktree}}}\n", encoding="utf-8")
    return (Fleet(state, command="ouro plan", cached=True, identity=TEST_IDENTITY),
            load_specs([specs], state_dir=state))


def test_a_fleet_observed_in_halves_is_observed_as_one_by_one(
        tmp_path: Path, few_halves: list[int], new_children: Children) -> None:
    fleet, loaded = _six_lineages(tmp_path)
    together = fleet.observe_all(loaded)
    assert together == {spec.name: fleet.observe(spec) for spec in loaded}
    assert [found.generations for found in together.values()] == [0, 1, 2, 0, 1, 2]
    assert few_halves[:3] == [PARENT] * 3 and PARENT not in few_halves[3:6]
    assert not new_children()


def test_a_fleet_planned_in_halves_is_planned_as_one_by_one(
        tmp_path: Path, few_halves: list[int], new_children: Children) -> None:
    fleet, loaded = _six_lineages(tmp_path)
    together = fleet.plan(loaded)
    assert len(few_halves) == 6 and PARENT not in few_halves[3:]  # (the second half: a child)
    one_by_one = fleet.plan(loaded, observed={spec.name: fleet.observe(spec)
                                              for spec in loaded})
    assert together == one_by_one
    assert [(item.name, item.action, item.missing_generations)
            for item in together.lineages] == [
        ("l0", "extend", 3), ("l1", "extend", 2), ("l2", "extend", 1),
        ("l3", "extend", 3), ("l4", "extend", 2), ("l5", "extend", 1)]
    assert together.counts["extend"] == 6 and sum(together.counts.values()) == 6
    assert not new_children()


@pytest.mark.parametrize(("answer", "code"), [([-1] * 10, 1), ([-1] * 9, 0), ([], 0)],
                         ids=["then-failed", "short", "empty"])
def test_a_childs_answer_is_taken_only_whole_and_from_a_clean_exit(
        monkeypatch: pytest.MonkeyPatch, answer: list[int], code: int,
        new_children: Children) -> None:
    def child(function: object, items: object, read_end: int, write_end: int) -> None:
        os.write(write_end, pickle.dumps(answer))
        os._exit(code)

    monkeypatch.setattr(halves, "_child", child)
    assert map_halves(lambda item: item, list(range(20)), min_items=10) == list(range(20))
    assert not new_children()


@pytest.mark.parametrize("call", ["pipe", "fork"])
def test_with_no_process_or_descriptor_to_spare_the_map_is_serial(
        monkeypatch: pytest.MonkeyPatch, new_children: Children, call: str) -> None:
    opened: list[int] = []
    real_pipe = os.pipe

    def pipe() -> tuple[int, int]:
        if call == "pipe":
            raise OSError(errno.EMFILE, "Too many open files")
        ends = real_pipe()
        opened.extend(ends)
        return ends

    def fork() -> int:
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(halves.os, "pipe", pipe)
    monkeypatch.setattr(halves.os, "fork", fork)
    assert map_halves(_where, list(range(20)), min_items=10) == [
        (item * item, PARENT) for item in range(20)]
    for end in opened:  # the pipe made before the fork failed is closed again
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(end)
    assert not new_children()
