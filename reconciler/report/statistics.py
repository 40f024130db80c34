"""Replicate statistics: a metric compared across groups of lineages, with its rules stated.

Rule: pure computation, numbers in and numbers out. Nothing here reads a lineage or
decides anything about one (which continue, which are best): it summarizes the values
it is given, and every choice it makes is written into its answer (the survivor rule,
the confidence level, the bootstrap's method, resamples and seed, the test). ``ouro
compare``, its figure and the viewer's set page all call ``compare_at`` and ``series``:
one home for these numbers.

The survivor rule (``SURVIVOR_RULE``): a member is alive at generation G when its history
reaches G. One whose history ends before G (it stopped, or was never extended that far)
is counted as not alive and left out of ``n``: never carried forward silently. With
``carry_last`` it is read at its last measured generation instead (counted in ``n`` and
in ``carried``, still not alive). A member alive at G without a numeric reading there (a
probe failure, a metric it does not have) is alive and out of ``n``.

The libraries do the statistics: ``scipy.stats.bootstrap`` (BCa, a fixed seed) for the
confidence interval of a group's mean and of a difference of means, and
``scipy.stats.mannwhitneyu`` (two-sided) for the p-value. numpy and scipy are imported
when a comparison is computed, never when this module is imported.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "CI_METHOD",
    "CONFIDENCE",
    "RESAMPLES",
    "SEED",
    "SURVIVOR_RULE",
    "TEST",
    "Comparison",
    "GroupAt",
    "MemberSeries",
    "PairAt",
    "Reading",
    "compare_at",
    "series",
]

SEED = 38  # the bootstrap's seed: fixed, printed, so the same input gives the same numbers
CONFIDENCE = 0.95
RESAMPLES = 9999
CI_METHOD = "bootstrap BCa (scipy.stats.bootstrap)"
TEST = "Mann-Whitney U, two-sided (scipy.stats.mannwhitneyu)"
SURVIVOR_RULE = (
    "a member is alive at generation G when its history reaches G; one whose history ends "
    "before G (stopped, or not extended that far) is counted not alive and left out of n "
    "(never carried forward)")
CARRY_RULE = (
    "--carry-last: a member whose history ends before G is read at its last measured "
    "generation (counted in n and in carried; still not alive)")


@dataclass(frozen=True)
class MemberSeries:
    """One lineage's readings of the metric: ``last`` is the newest generation its history
    has (None: none at all), ``values`` its numeric readings by generation (0: the seed)."""

    name: str
    group: str
    last: int | None
    values: Mapping[int, float]


@dataclass(frozen=True)
class Reading:
    """A member's value counted in a group's ``n``: read at ``generation`` (an earlier one
    than asked only under carry-last)."""

    member: str
    value: float
    generation: int


@dataclass(frozen=True)
class GroupAt:
    """A group at one generation. Every statistic is None when ``n`` is 0; the CI is None
    when ``n`` < 2 (no interval from one value)."""

    group: str
    members: int
    alive: int
    n: int
    carried: int
    mean: float | None
    median: float | None
    ci_low: float | None
    ci_high: float | None
    minimum: float | None
    maximum: float | None
    readings: tuple[Reading, ...]


@dataclass(frozen=True)
class PairAt:
    """``first`` minus ``second``: the difference of means, its CI (None below two values
    on either side) and the test's p-value (None when either group has no value)."""

    first: str
    second: str
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    statistic: float | None
    p_value: float | None


@dataclass(frozen=True)
class Comparison:
    """The groups (and, when asked, every pair of them) at ``generation``, with the rules
    that made the numbers."""

    generation: int
    carry_last: bool
    groups: tuple[GroupAt, ...]
    pairs: tuple[PairAt, ...]
    seed: int = SEED
    confidence: float = CONFIDENCE
    resamples: int = RESAMPLES
    ci_method: str = CI_METHOD
    test: str = TEST

    @property
    def rule(self) -> str:
        return SURVIVOR_RULE + (f"; {CARRY_RULE}" if self.carry_last else "")


def _reading(member: MemberSeries, generation: int, carry_last: bool) -> Reading | None:
    """The member's value counted at ``generation`` under the survivor rule (None: out of n)."""
    if member.last is None:
        return None
    if member.last >= generation:
        value = member.values.get(generation)
        return None if value is None else Reading(member.name, value, generation)
    if not carry_last:
        return None
    earlier = [number for number in member.values if number <= member.last]
    if not earlier:
        return None
    at = max(earlier)
    return Reading(member.name, member.values[at], at)


def _float(value: Any) -> float | None:
    number = float(value)
    return None if math.isnan(number) else number


def _interval(samples: tuple[NDArray[np.float64], ...], seed: int, resamples: int,
              confidence: float) -> tuple[float | None, float | None]:
    """The BCa bootstrap interval of the mean (one sample) or of the difference of means
    (two). All values equal: the bootstrap distribution is that one point, and so is the
    interval (BCa's acceleration is undefined there, scipy answers NaN)."""
    import numpy as np
    from scipy import stats

    if any(len(sample) < 2 for sample in samples):
        return None, None
    if all(np.ptp(sample) == 0 for sample in samples):
        point = (float(samples[0][0]) if len(samples) == 1
                 else float(samples[0][0] - samples[1][0]))
        return point, point

    def statistic(*data: NDArray[np.float64], axis: int = -1) -> Any:
        means = [np.mean(sample, axis=axis) for sample in data]
        return means[0] if len(means) == 1 else means[0] - means[1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate resample: the interval says NaN
        found = stats.bootstrap(samples, statistic, n_resamples=resamples,
                                confidence_level=confidence, method="BCa",
                                rng=np.random.default_rng(seed), vectorized=True)
    interval = found.confidence_interval
    return _float(interval.low), _float(interval.high)


def _group(name: str, members: Sequence[MemberSeries], generation: int, carry_last: bool,
           seed: int, resamples: int, confidence: float) -> GroupAt:
    import numpy as np

    readings = tuple(found for member in members
                     if (found := _reading(member, generation, carry_last)) is not None)
    alive = sum(1 for member in members if member.last is not None
                and member.last >= generation)
    carried = sum(1 for found in readings if found.generation != generation)
    values = np.array([found.value for found in readings], dtype=np.float64)
    if not len(values):
        return GroupAt(name, len(members), alive, 0, 0, None, None, None, None, None, None, ())
    low, high = _interval((values,), seed, resamples, confidence)
    return GroupAt(
        group=name, members=len(members), alive=alive, n=len(values), carried=carried,
        mean=float(np.mean(values)), median=float(np.median(values)), ci_low=low,
        ci_high=high, minimum=float(np.min(values)), maximum=float(np.max(values)),
        readings=readings)


def _pair(first: GroupAt, second: GroupAt, seed: int, resamples: int,
          confidence: float) -> PairAt:
    import numpy as np
    from scipy import stats

    a = np.array([found.value for found in first.readings], dtype=np.float64)
    b = np.array([found.value for found in second.readings], dtype=np.float64)
    if not len(a) or not len(b):
        return PairAt(first.group, second.group, None, None, None, None, None)
    low, high = _interval((a, b), seed, resamples, confidence)
    tested = stats.mannwhitneyu(a, b, alternative="two-sided")
    return PairAt(first.group, second.group, float(np.mean(a) - np.mean(b)), low, high,
                  _float(tested.statistic), _float(tested.pvalue))


def _groups(members: Sequence[MemberSeries]) -> dict[str, list[MemberSeries]]:
    """The members by group, the groups in their first member's order."""
    found: dict[str, list[MemberSeries]] = {}
    for member in members:
        found.setdefault(member.group, []).append(member)
    return found


def compare_at(members: Sequence[MemberSeries], generation: int, *, carry_last: bool = False,
               pairs: bool = True, seed: int = SEED, resamples: int = RESAMPLES,
               confidence: float = CONFIDENCE) -> Comparison:
    """Each group's statistics at ``generation`` and (``pairs``) every pair's difference,
    in the groups' order (a group's first member's place in ``members``)."""
    groups = tuple(_group(name, found, generation, carry_last, seed, resamples, confidence)
                   for name, found in _groups(members).items())
    compared = tuple(_pair(a, b, seed, resamples, confidence)
                     for a, b in combinations(groups, 2)) if pairs else ()
    return Comparison(generation, carry_last, groups, compared, seed, confidence, resamples)


def series(members: Sequence[MemberSeries], generations: Sequence[int], *,
           carry_last: bool = False, seed: int = SEED, resamples: int = RESAMPLES,
           confidence: float = CONFIDENCE) -> list[Comparison]:
    """``compare_at`` at each of ``generations``, groups only (a figure's bands)."""
    return [compare_at(members, generation, carry_last=carry_last, pairs=False, seed=seed,
                       resamples=resamples, confidence=confidence)
            for generation in generations]
