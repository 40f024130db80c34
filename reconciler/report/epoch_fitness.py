"""A selected set's fitness per epoch, as ``ouro status`` and the viewer's set page show it.

Rule: the values are ``reconciler.engine.set_epochs.epoch_values``' (the rule's ``by`` at
each member's last generation of an epoch, from the one per-generation table); each
epoch is one group of ``reconciler.report.statistics`` (read at a generation 0 of its
own), so its ``n``, mean and 95% CI are the same bootstrap's as `ouro compare`'s. The
best is the highest value (the lowest with ``lowest: true``). An epoch without a value
has a count of 0 and no statistic. The bootstrap resamples the values in the order of
their members' names, so the same values give the same CI whatever order a table read
them in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.report.statistics import MemberSeries, compare_at

__all__ = ["EpochFitness", "epoch_fitness"]


@dataclass(frozen=True)
class EpochFitness:
    """The rule's ``by`` over the members measured at the end of ``epoch``."""

    epoch: int
    measured: int  # members with a numeric value at their last generation of the epoch
    best: float | None
    mean: float | None
    ci_low: float | None  # the 95% CI of the mean (None below two values)
    ci_high: float | None

    def as_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "measured": self.measured, "best": self.best,
                "mean": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high}


def _group(epoch: int) -> str:
    return f"epoch {epoch}"


def epoch_fitness(values: Mapping[int, Mapping[str, float]],
                  lowest: bool) -> tuple[EpochFitness, ...]:
    """Each epoch of ``values`` (epoch -> member -> value), in order: its count, best,
    mean and the mean's 95% CI."""
    members = [MemberSeries(f"{name}@{epoch}", _group(epoch), 0, {0: value})
               for epoch, found in values.items() for name, value in sorted(found.items())]
    groups = ({group.group: group for group in compare_at(members, 0, pairs=False).groups}
              if members else {})
    pick = min if lowest else max
    out = []
    for epoch, found in sorted(values.items()):
        group = groups.get(_group(epoch))
        out.append(EpochFitness(epoch, 0, None, None, None, None) if group is None else
                   EpochFitness(epoch, group.n, pick(found.values()), group.mean,
                                group.ci_low, group.ci_high))
    return tuple(out)
