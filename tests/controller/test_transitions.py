"""The controller's transitions, table-driven with a fake clock (as Flux's
runtime/conditions tests are): a condition's time moves only with its status, and each
notification is sent once per transition — not at every pass that sees it again.

In process and fast: the conditions are derived by ``conditions.derive``, the
notifications decided by a real ``Controller`` whose notifier records what it was asked
to send and whose spec source is a stand-in that fails or answers as the row says.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine.controller import conditions
from reconciler.engine.controller.conditions import LineageView
from reconciler.engine.controller.loop import (
    Controller,
    ControllerSettings,
    newly_done,
    newly_refused,
)
from reconciler.engine.controller.source import SourceError
from reconciler.plan.probes import UntilStop
from reconciler.state.conditions import Condition, LineageConditions


class Clock:
    """A fake clock: ``tick`` moves it one second; each call reads the time now."""

    def __init__(self) -> None:
        self.second = 0

    def __call__(self) -> str:
        return f"2030-01-01T00:00:{self.second:02d}+00:00"

    def tick(self) -> str:
        self.second += 1
        return self()


T = [f"2030-01-01T00:00:{second:02d}+00:00" for second in range(60)]

# (the view at this pass, then each condition as (status, reason, last_transition))
CONDITION_ROWS: list[tuple[LineageView, dict[str, tuple[str, str, str]]]] = [
    (LineageView("x", "extend", "", 1, 3), {
        "Ready": ("False", "extend", T[1]), "Progressing": ("True", "extend", T[1]),
        "Stalled": ("False", "as-planned", T[1]),
        "Suspended": ("False", "not-suspended", T[1])}),
    # one more generation: nothing transitions
    (LineageView("x", "extend", "", 2, 3), {
        "Ready": ("False", "extend", T[1]), "Progressing": ("True", "extend", T[1]),
        "Stalled": ("False", "as-planned", T[1]),
        "Suspended": ("False", "not-suspended", T[1])}),
    # stalled by an outage: Progressing and Stalled change status now
    (LineageView("x", "extend", "", 2, 3, stalled_reason="provider-unavailable"), {
        "Ready": ("False", "extend", T[1]),
        "Progressing": ("False", "provider-unavailable", T[3]),
        "Stalled": ("True", "provider-unavailable", T[3]),
        "Suspended": ("False", "not-suspended", T[1])}),
    # still stalled, for another reason: the reason moves, the time does not
    (LineageView("x", "extend", "", 2, 3, stalled_reason="error"), {
        "Ready": ("False", "extend", T[1]), "Progressing": ("False", "error", T[3]),
        "Stalled": ("True", "error", T[3]), "Suspended": ("False", "not-suspended", T[1])}),
    # suspended while stalled
    (LineageView("x", "extend", "", 2, 3, suspended=True, stalled_reason="error"), {
        "Ready": ("False", "extend", T[1]), "Progressing": ("False", "suspended", T[3]),
        "Stalled": ("True", "error", T[3]), "Suspended": ("True", "suspended", T[5])}),
    # resumed and running again
    (LineageView("x", "extend", "", 2, 3), {
        "Ready": ("False", "extend", T[1]), "Progressing": ("True", "extend", T[6]),
        "Stalled": ("False", "as-planned", T[6]),
        "Suspended": ("False", "not-suspended", T[6])}),
    # finished: Ready turns True, Progressing False (its reason the action)
    (LineageView("x", "in-sync", "up to date", 3, 3), {
        "Ready": ("True", "in-sync", T[7]), "Progressing": ("False", "in-sync", T[7]),
        "Stalled": ("False", "as-planned", T[6]),
        "Suspended": ("False", "not-suspended", T[6])}),
    # done, by another action: Ready's reason moves, its time does not
    (LineageView("x", "done", "target reached", 3, 3), {
        "Ready": ("True", "done", T[7]), "Progressing": ("False", "done", T[7]),
        "Stalled": ("False", "as-planned", T[6]),
        "Suspended": ("False", "not-suspended", T[6])}),
]


def _table(found: LineageConditions) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.last_transition) for c in found.conditions}


def test_a_transition_time_moves_only_with_the_status_row_by_row() -> None:
    clock = Clock()
    before: LineageConditions | None = None
    for index, (view, expected) in enumerate(CONDITION_ROWS, start=1):
        clock.tick()
        found = conditions.derive(view, before, clock)
        assert _table(found) == expected, f"row {index}: {view}"
        before = found
    orphan = conditions.orphaned("x", 3, before, clock.__call__)
    assert _table(orphan)["Ready"] == ("Unknown", "orphaned", T[len(CONDITION_ROWS)])
    assert _table(orphan)["Stalled"] == ("False", "orphaned", T[6])  # still False: kept


# ------------------------------------------------------------ notifications


@dataclass
class Sent:
    """The notifier: what the controller asked it to send, in order."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    active: bool = True

    def send(self, event: str, text: str, **fields: Any) -> None:
        self.events.append((event, {"text": text, **fields}))

    def names(self) -> list[str]:
        return [event for event, _ in self.events]


@dataclass
class Source:
    """The spec repository: each fetch fails with the row's message, or answers."""

    url: str = "/srv/specs.git"
    down: str | None = None

    def fetch(self) -> str:
        if self.down is not None:
            raise SourceError(self.down)
        return "a" * 40


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[tuple[Controller, Sent, Source]]:
    found = Controller(ControllerSettings(repo=str(tmp_path / "specs.git"),
                                          state_dir=tmp_path / "state"),
                       reporter=None,  # type: ignore[arg-type]  (no pass runs)
                       say=lambda _: None, clock=Clock())
    sent, source = Sent(), Source()
    found.notifier = sent  # type: ignore[assignment]
    found.source = source  # type: ignore[assignment]
    found._tried = "a" * 40  # that head is considered already: a pass only fetches
    yield found, sent, source


# each row: the fetch of each pass (None: it answers), the controller-errors sent
ERROR_ROWS = [
    (["down"], 1),
    (["down", "down", "down", "down"], 1),  # one error, said once
    (["down", "down", None, "down"], 2),  # cleared, then a new one
    (["down", "down as well"], 2),  # another error is said too
    ([None, None], 0),
]


@pytest.mark.parametrize(("passes", "said"), ERROR_ROWS)
def test_a_controller_error_is_notified_once_while_it_lasts(
        controller: tuple[Controller, Sent, Source], passes: list[str | None],
        said: int) -> None:
    found, sent, source = controller
    for fetch in passes:
        source.down = fetch
        found.tick()
        assert (found.own.last_error is None) == (fetch is None)
    assert sent.names() == ["controller-error"] * said


def _died(generation: int) -> tuple[str, dict[str, Any]]:
    return "generation", {"lineage": "m", "generation": generation, "status": "died",
                          "outcome": "exit 3"}


def _lived(generation: int) -> tuple[str, dict[str, Any]]:
    return "generation", {"lineage": "m", "generation": generation, "status": "changed"}


def _stopped(generation: int, reason: str) -> tuple[str, dict[str, Any]]:
    return "lineage-stopped", {"lineage": "g", "generation": generation, "reason": reason,
                               "message": "why"}


# the engine's events heard in a row; the notifications, with (lineage, generation)
HEARD_ROWS = [
    ([_died(1), _died(2)], []),
    ([_died(1), _died(2), _died(3), _died(4), _died(5)], [("death-streak", "m", 3)]),
    ([_died(1), _died(2), _lived(3), _died(4), _died(5), _died(6)],
     [("death-streak", "m", 6)]),
    ([_died(1), _died(2), _died(3), _lived(4), _died(5), _died(6), _died(7)],
     [("death-streak", "m", 3), ("death-streak", "m", 7)]),
    ([_stopped(2, "target-reached")], [("target-reached", "g", 2)]),
    ([_stopped(4, "plateau")], [("target-reached", "g", 4)]),
    ([_stopped(1, "permission")], [("lineage-stopped", "g", 1)]),
    ([_died(1), _died(2), _died(3), _stopped(3, "target-reached")],
     [("death-streak", "m", 3), ("target-reached", "g", 3)]),
]


@pytest.mark.parametrize(("heard", "expected"), HEARD_ROWS)
def test_a_lineages_course_is_notified_once_per_transition(
        controller: tuple[Controller, Sent, Source],
        heard: list[tuple[str, dict[str, Any]]], expected: list[tuple[str, str, int]]) -> None:
    found, sent, _ = controller
    for event, fields in heard:
        found._heard(event, fields)
    assert [(event, fields["lineage"], fields["generation"])
            for event, fields in sent.events] == expected


def _stalled(reason: str | None) -> LineageConditions:
    status = "False" if reason is None else "True"
    return LineageConditions("x", (Condition("Stalled", status, reason or "as-planned", "m",
                                             T[0]),))


# Stalled before the pass, after it; refused notified?
REFUSED_ROWS = [
    (None, "kernel-unavailable", True),  # a first refusal
    ("kernel-unavailable", "kernel-unavailable", False),  # still refused: not again
    ("kernel-unavailable", "fingerprint-drift", True),  # another refusal
    (None, "provider-unavailable", False),  # a stop, not a refusal
    ("provider-unavailable", "kernel-unavailable", True),
    ("kernel-unavailable", None, False),  # no longer refused
]


@pytest.mark.parametrize(("was", "now", "notified"), REFUSED_ROWS)
def test_a_refusal_is_notified_when_it_starts_or_changes(was: str | None, now: str | None,
                                                         notified: bool) -> None:
    before = {"x": _stalled(was).get("Stalled")} if was is not None else {}
    found = newly_refused(before, {"x": _stalled(now)})
    assert [name for name, _ in found] == (["x"] if notified else [])


def _ready(reason: str | None) -> Condition | None:
    if reason is None:
        return None
    return Condition("Ready", "True" if reason in ("in-sync", "done") else "False", reason,
                     "", T[0])


STOP = UntilStop("target-reached", 2, "gen 2 measured defuns.defuns = 2, at least 1")

# Ready before the pass (absent: first seen in this pass); done by its spec in this pass?
DONE_ROWS = [
    ("in-sync", True, True),  # a changed until now holds: said
    ("extend", True, True),
    ("done", True, False),  # done already (by the engine's stop, said then): not again
    ("absent", True, False),  # first seen (no previous document): not said
    ("in-sync", False, False),  # not done
]


@pytest.mark.parametrize(("was", "done", "said"), DONE_ROWS)
def test_a_lineage_done_because_its_spec_changed_is_said_once(was: str, done: bool,
                                                              said: bool) -> None:
    before = {} if was == "absent" else {"x": _ready(was)}
    found = newly_done(before, {"x": STOP} if done else {})
    assert found == ([("x", STOP)] if said else [])


def test_the_budget_stays_blocked_through_passes_that_start_nothing(
        controller: tuple[Controller, Sent, Source]) -> None:
    """Blocked once ($0.60 spent, $0.50 worst case, $1.00 a day), a later pass that
    starts nothing (every lineage settled) neither clears the block nor notifies it
    again; the next day, or a spend that fits, clears it."""
    from decimal import Decimal

    from reconciler.engine.controller.budget import DailyBudget

    found, sent, _source = controller
    budget = DailyBudget(Decimal("1.00"), spent=Decimal("0.60"), worst=Decimal("0.50"))
    found._spent(budget, budget.message())
    for _pass in range(3):
        found._spent(budget, None)  # nothing was tried this pass
        assert found.own.budget is not None and found.own.budget["blocked"], _pass
    assert sent.names().count("budget-exhausted") == 1
    fits = DailyBudget(Decimal("1.00"), spent=Decimal("0.40"), worst=Decimal("0.50"))
    found._spent(fits, None)
    assert found.own.budget["blocked"] is None
