"""The measurement work a plan shows: generations x probes still unmeasured. Pure.

Rule: every generation is measured by every probe at its current digest, the seed
(generation 0) too; the work is the (digest, generation) pairs without a record, over
the generations the lineage will have after this apply (0 to N), bounded in CPU by
each probe's cpu ceiling.
The observed coverage is data (``reconciler.state.probes.coverage``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["GOAL_STOPS", "UNSEEN_AFTER", "MeasurementWork", "ProbeLike", "UntilStop",
           "measurement_work", "shown_stop", "unseen_metrics", "until_stop"]

# The stop codes of a lineage reaching its goal (``spec.until``), not a fault: an
# UntilStop's codes, and the one list every reader of a stop reason checks.
GOAL_STOPS = ("target-reached", "plateau")
# A spec.until metric of a probe that declares no ``metrics`` and has never printed it in
# this many measured generations is named in the plan: most likely a typo (a declared
# probe's until is checked at validate instead).
UNSEEN_AFTER = 3


class ProbeLike(Protocol):
    @property
    def digest(self) -> str: ...
    @property
    def ceilings(self) -> Any: ...  # .cpu: CPU seconds


@dataclass(frozen=True)
class MeasurementWork:
    measurements: int = 0  # (probe, generation) pairs to measure
    cpu_seconds: int = 0  # their bound: each at its probe's cpu ceiling
    probes: int = 0

    def as_json(self) -> dict[str, int]:
        return {"measurements": self.measurements, "cpu_seconds_bound": self.cpu_seconds,
                "probes": self.probes}


def measurement_work(probes: Sequence[ProbeLike], generations: int,
                     coverage: Mapping[str, Set[int]]) -> MeasurementWork:
    """What measuring the seed and ``generations`` (0..N) with ``probes`` still takes."""
    count = cpu = 0
    for probe in probes:
        done = coverage.get(probe.digest, frozenset())
        missing = generations + 1 - sum(1 for n in done if 0 <= n <= generations)
        count += missing
        cpu += missing * int(probe.ceilings.cpu)
    return MeasurementWork(count, cpu, len(probes))


class ConditionLike(Protocol):
    @property
    def probe(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def at_least(self) -> float | int | None: ...
    @property
    def at_most(self) -> float | int | None: ...
    @property
    def plateau(self) -> int | None: ...


@dataclass(frozen=True)
class UntilStop:
    """``spec.until`` holds: the lineage is done (``code``: target-reached | plateau)."""

    code: str
    generation: int  # the generation whose measurement made it hold
    message: str


Series = Mapping[int, Mapping[str, Any] | None]  # generation -> metrics (None: a failure)


def _values(series: Series, metric: str, generations: int) -> list[tuple[int, float]]:
    """The metric's successful numeric measurements, by generation (failures, booleans,
    strings and missing metrics are none: they never satisfy a condition)."""
    found = []
    for number in sorted(series):
        metrics = series[number]
        value = metrics.get(metric) if metrics is not None else None
        if 1 <= number <= generations and isinstance(value, int | float) \
                and not isinstance(value, bool):
            found.append((number, float(value)))
    return found


def _holds(condition: ConditionLike, values: list[tuple[int, float]]) -> UntilStop | None:
    name = f"{condition.probe}.{condition.metric}"
    for number, value in values:
        if condition.at_least is not None and value >= condition.at_least:
            return UntilStop("target-reached", number, f"gen {number} measured {name} = "
                             f"{value:g}, at least {condition.at_least:g} (spec.until)")
        if condition.at_most is not None and value <= condition.at_most:
            return UntilStop("target-reached", number, f"gen {number} measured {name} = "
                             f"{value:g}, at most {condition.at_most:g} (spec.until)")
    if condition.plateau is not None:
        best, best_index = float("-inf"), -1
        for index, (_, value) in enumerate(values):
            if value > best:
                best, best_index = value, index
            elif index - best_index >= condition.plateau:
                number = values[index][0]
                return UntilStop("plateau", number, f"{name} has had no new best in "
                                 f"{condition.plateau} measured generations (best {best:g} at "
                                 f"gen {values[best_index][0]}; spec.until)")
    return None


def until_stop(conditions: Sequence[ConditionLike], digests: Mapping[str, str],
               metrics: Mapping[str, Series], generations: int) -> UntilStop | None:
    """The first condition (in the spec's order) that holds over generations 1..N, read
    at each probe's current digest (``digests``: probe name -> digest)."""
    for condition in conditions:
        digest = digests.get(condition.probe)
        if digest is None:
            continue
        found = _holds(condition, _values(metrics.get(digest, {}), condition.metric,
                                          generations))
        if found is not None:
            return found
    return None


def shown_stop(conditions: Sequence[ConditionLike], digests: Mapping[str, str],
               metrics: Callable[[], Mapping[str, Series]], generations: int,
               desired: int | None) -> UntilStop | None:
    """The ``spec.until`` stop that ``ouro status``, ``ouro log`` and the viewer show: the
    condition that holds (``until_stop``) while the lineage is short of its target
    (``desired``; None: not known). A lineage at its target is complete, not stopped.
    ``metrics`` is read only when a condition could hold (it reads the probe records)."""
    if not conditions or (desired is not None and generations >= desired):
        return None
    return until_stop(conditions, digests, metrics(), generations)


def unseen_metrics(conditions: Sequence[ConditionLike], declared: Mapping[str, Any],
                   digests: Mapping[str, str], metrics: Mapping[str, Series]) -> list[str]:
    """A note for each ``spec.until`` condition whose probe declares no metrics
    (``declared``: probe name -> its ``metrics`` list or None) and that has measured at
    least ``UNSEEN_AFTER`` generations without ever printing the condition's metric."""
    notes = []
    for condition in conditions:
        digest = digests.get(condition.probe)
        if digest is None or declared.get(condition.probe) is not None:
            continue
        measured = [found for found in metrics.get(digest, {}).values()
                    if isinstance(found, Mapping)]
        if len(measured) >= UNSEEN_AFTER and not any(condition.metric in found
                                                     for found in measured):
            printed = sorted({name for found in measured for name in found})[:8]
            notes.append(
                f"spec.until: probe {condition.probe} has measured {len(measured)} "
                f"generations and never printed {condition.metric!r} (it printed: "
                f"{', '.join(printed) or 'nothing'}); a typo? Declare the probe's metrics "
                "(metrics: [...]) to have until checked at validate")
    return notes
