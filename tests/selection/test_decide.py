"""Selection decisions as pure functions (issue 39, item 2), from hand-written tables."""

from __future__ import annotations

from typing import Any

from reconciler.plan.selection import Candidate, Decision, decide, rng
from reconciler.plan.selection.map_elites import bin_of
from reconciler.spec.selection import SelectionSpec

BY = "probe.size.bytes"


def _rule(**fields: Any) -> SelectionSpec:
    return SelectionSpec.model_validate({"every": 2, "epochs": 3, "by": BY, "seed": 7,
                                         **fields})


def _table(values: dict[str, float | None], **more: dict[str, float]) -> list[Candidate]:
    return [Candidate(name, 2, {BY: value, **{k: v[name] for k, v in more.items()}})
            for name, value in values.items()]


def _decide(candidates: list[Candidate], rule: SelectionSpec, epoch: int = 1,
            size: int | None = None) -> Decision:
    return decide(candidates, rule, epoch, rng(rule.seed, epoch), set_name="pop",
                  size=size or len(candidates))


def test_truncation_keeps_the_top_k_ties_broken_by_name() -> None:
    table = _table({"pop-5": 5, "pop-4": 20, "pop-3": 30, "pop-2": 20, "pop-1": 30,
                    "pop-0": 10})  # written in reverse: the order is no tie-break
    decision = _decide(table, _rule(keep=3))
    assert decision.kept == ("pop-1", "pop-3", "pop-2")  # 30, 30 (by name), 20 < pop-4
    assert decision.stopped == ("pop-0", "pop-4", "pop-5")
    assert [(b.name, b.parent, b.generation, b.value) for b in decision.born] == [
        ("pop-e2-0", "pop-1", 2, 30.0), ("pop-e2-1", "pop-3", 2, 30.0),
        ("pop-e2-2", "pop-2", 2, 20.0)]
    assert decision.values["pop-5"] == 5.0


def test_lowest_turns_the_ranking_round() -> None:
    table = _table({"pop-0": 10, "pop-1": 30, "pop-2": 20})
    assert _decide(table, _rule(keep=1, lowest=True)).kept == ("pop-0",)


def test_a_missing_measurement_makes_the_decision_wait_naming_it() -> None:
    table = _table({"pop-0": 10, "pop-1": None, "pop-2": 20})
    decision = _decide(table, _rule(keep=1))
    assert decision.waiting
    assert decision.waits_for == (f"pop-1: {BY}",)
    assert not decision.kept and not decision.stopped and not decision.born


def test_a_non_number_is_no_measurement() -> None:
    table = [Candidate("pop-0", 2, {BY: "12"}), Candidate("pop-1", 2, {BY: True})]
    assert _decide(table, _rule(keep=1)).waits_for == (f"pop-0: {BY}", f"pop-1: {BY}")


def test_tournament_is_the_same_for_a_seed_and_another_for_another_seed() -> None:
    table = _table({f"pop-{i}": float((i * 37) % 11) for i in range(12)})
    rule = _rule(method="tournament", tournament={"size": 3})
    first, again = _decide(table, rule), _decide(table, rule)
    assert first == again
    others = {_decide(table, _rule(method="tournament", tournament={"size": 3}, seed=seed))
              .as_json()["born"].__repr__() for seed in range(8)}
    assert len(others) > 1  # another seed: another decision
    everyone = set(first.kept) | set(first.stopped)
    assert everyone == {one.name for one in table}
    assert len(first.kept) + len(first.born) == 12
    assert {b.parent for b in first.born} <= set(first.kept)
    worst = min(table, key=lambda one: (one.value(BY), one.name))
    assert worst.name not in first.kept  # it never wins a tournament of 3


def test_a_tournament_of_everyone_always_picks_the_best() -> None:
    table = _table({"pop-0": 1, "pop-1": 9, "pop-2": 5})
    decision = _decide(table, _rule(method="tournament", tournament={"size": 3}))
    assert decision.kept == ("pop-1",)
    assert [b.parent for b in decision.born] == ["pop-1", "pop-1"]


def test_map_elites_each_bin_keeps_its_best_and_parents_come_from_occupied_bins() -> None:
    table = _table({"pop-0": 1, "pop-1": 2, "pop-2": 3, "pop-3": 4, "pop-4": 5},
                   organism_bytes={"pop-0": 50, "pop-1": 150, "pop-2": 60, "pop-3": 170,
                                   "pop-4": 500})
    rule = _rule(method="map-elites",
                 **{"map-elites": {"descriptors": [{"by": "organism_bytes",
                                                    "bins": [100, 200]}]}})
    assert [bin_of(one, rule) for one in table] == [(0,), (1,), (0,), (1,), (2,)]
    decision = _decide(table, rule)
    assert decision.kept == ("pop-2", "pop-3", "pop-4")  # best of bins 0, 1, 2
    assert decision.stopped == ("pop-0", "pop-1")
    assert len(decision.born) == 2
    assert {b.parent for b in decision.born} <= set(decision.kept)
    assert decision == _decide(table, rule)
    draws = {tuple(b.parent for b in _decide(table, rule, epoch=e).born) for e in range(1, 9)}
    assert len(draws) > 1  # the epoch is part of the generator's seed


def test_a_map_elites_descriptor_measurement_is_waited_for() -> None:
    table = _table({"pop-0": 1, "pop-1": 2}, organism_bytes={"pop-0": 5, "pop-1": 6})
    table[1] = Candidate("pop-1", 2, {BY: 2})
    rule = _rule(method="map-elites",
                 **{"map-elites": {"descriptors": [{"by": "organism_bytes", "bins": [1]}]}})
    assert _decide(table, rule).waits_for == ("pop-1: organism_bytes",)
