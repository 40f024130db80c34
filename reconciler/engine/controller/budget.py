"""``--max-spend-per-day``: start no generation the day's budget could not pay for.

Rule: the day (UTC) is the day a generation started, as its observation records it: the
day's spend is read from the lineages' records (``reconciler.state.summaries``, cached),
never kept by the controller, so a restart knows it. A generation may start only while
the day's recorded spend, plus the worst case of the generations already started in this
pass and not yet recorded, plus the worst case of this one (its model's ``budget_usd``;
nothing for a free model) stays within the limit. ``PassLimits`` is apply's ``Limits``
with that check added at the one place a generation is admitted.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path

from reconciler.engine.apply import Limits
from reconciler.kernel.base.config import FREE, LineagePaths
from reconciler.spec.load import LoadedSpec
from reconciler.state.summaries import summarize

__all__ = ["THRESHOLDS", "DailyBudget", "PassLimits", "recorded_spend", "worst_case"]

THRESHOLDS = (Decimal("0.5"), Decimal("0.8"), Decimal(1))  # shares of the limit notified


def _day(text: str | None) -> date | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).date()


def recorded_spend(paths: Sequence[LineagePaths], day: date,
                   cache_dir: Path | None) -> Decimal:
    """What the lineages' generations that started on ``day`` (UTC) recorded as spent."""
    total = Decimal(0)
    for place in paths:
        for row in summarize(place, cache_dir).rows:
            if row.spend_usd is None or _day(row.started_at) != day:
                continue
            try:
                total += Decimal(row.spend_usd)
            except InvalidOperation:
                continue
    return total


def worst_case(spec: LoadedSpec) -> Decimal:
    """The most one generation of ``spec`` may spend."""
    model = spec.model()
    return Decimal(0) if model.price == FREE else model.budget_usd


@dataclass
class DailyBudget:
    """One pass's view of the day's budget: ``admit`` before a generation, ``spent`` after."""

    limit: Decimal
    spent: Decimal = Decimal(0)  # recorded today, plus what finished in this pass
    worst: Decimal = Decimal(0)  # of the next generation (the pass's widest)
    reserved: Decimal = Decimal(0)
    blocked: bool = False
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def admit(self) -> bool:
        with self._mutex:
            if self.spent + self.reserved + self.worst > self.limit:
                self.blocked = True
                return False
            self.reserved += self.worst
            return True

    def finished(self, spend: Decimal) -> None:
        with self._mutex:
            self.reserved = max(Decimal(0), self.reserved - self.worst)
            self.spent += spend

    def message(self) -> str:
        return (f"the day's recorded spend ${self.spent} plus the next generation's worst "
                f"case ${self.worst} would exceed --max-spend-per-day ${self.limit}: no "
                "generation starts until the day (UTC) ends or the limit is raised")


@dataclass
class PassLimits(Limits):
    """Apply's limits, and the day's budget when there is one."""

    budget: DailyBudget | None = None

    def take_generation(self) -> bool:
        if not super().take_generation():
            return False
        if self.budget is not None and not self.budget.admit():
            self.stopped_by = self.stopped_by or "daily-budget"
            return False
        return True
