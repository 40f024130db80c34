"""The statistics module against hand-computed values (numpy directly, or by hand), and
the survivor rule as a table."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from reconciler.report.statistics import CONFIDENCE, MemberSeries, compare_at, series


def member(name: str, group: str, last: int | None, **values: float) -> MemberSeries:
    return MemberSeries(name, group, last, {int(k[1:]): v for k, v in values.items()})


A = [member("a0", "A", 3, g3=1.0), member("a1", "A", 3, g3=2.0), member("a2", "A", 3, g3=3.0)]
B = [member("b0", "B", 3, g3=10.0), member("b1", "B", 3, g3=11.0),
     member("b2", "B", 3, g3=13.0)]


def test_groups_and_pair_by_hand() -> None:
    found = compare_at([*A, *B], 3)
    a, b = found.groups
    assert (a.n, a.mean, a.median, a.minimum, a.maximum) == (3, 2.0, 2.0, 1.0, 3.0)
    assert (b.n, b.mean, b.median) == (3, pytest.approx(34 / 3), 11.0)
    assert a.ci_low is not None and a.ci_high is not None and a.mean is not None
    assert 1.0 <= a.ci_low <= a.mean <= a.ci_high <= 3.0  # within the data's range
    (pair,) = found.pairs
    assert pair.difference == pytest.approx(2.0 - 34 / 3)
    assert pair.p_value == pytest.approx(0.1)  # exact: 2 of C(6,3) = 20 orderings
    assert pair.statistic == 0.0  # no a exceeds any b
    assert compare_at([*A, *B], 3) == found  # the fixed seed: the same numbers


def test_equal_values_have_a_point_interval_and_one_value_none() -> None:
    same = [member(f"s{i}", "S", 1, g1=5.0) for i in range(3)]
    (group,) = compare_at(same, 1).groups
    assert (group.ci_low, group.ci_high) == (5.0, 5.0)
    (alone,) = compare_at([member("x", "X", 1, g1=4.0)], 1).groups
    assert (alone.n, alone.mean, alone.ci_low) == (1, 4.0, None)


@pytest.mark.parametrize(("last", "values", "carry", "alive", "n", "value"), [
    (3, {3: 7.0}, False, 1, 1, 7.0),     # alive, measured
    (3, {}, False, 1, 0, None),          # alive, no reading (a probe failure): out of n
    (2, {2: 6.0}, False, 0, 0, None),    # stopped before: not alive, out of n
    (2, {2: 6.0}, True, 0, 1, 6.0),      # carry-last: its last reading
    (2, {1: 5.0}, True, 0, 1, 5.0),      # ... its last *measured* generation
    (2, {1: 5.0, 2: 6.0}, True, 0, 1, 6.0),  # ... its last, not its first
    (None, {}, True, 0, 0, None),        # no history at all
], ids=["alive", "alive-unmeasured", "stopped", "carried", "carried-earlier", "carried-last",
      "none"])
def test_the_survivor_rule(last: int | None, values: dict[int, float], carry: bool,
                           alive: int, n: int, value: float | None) -> None:
    (group,) = compare_at([MemberSeries("m", "G", last, values)], 3, carry_last=carry).groups
    assert (group.alive, group.n, group.mean) == (alive, n, value)


def test_series_follows_n_as_members_stop() -> None:
    members = [member("a", "A", 2, g0=1.0, g1=2.0, g2=3.0),
               member("b", "A", 1, g0=1.0, g1=4.0)]
    points = series(members, [0, 1, 2])
    assert [p.groups[0].n for p in points] == [2, 2, 1]
    assert [p.groups[0].mean for p in points] == [1.0, np.mean([2.0, 4.0]), 3.0]


def test_the_interval_has_the_confidence_asked() -> None:
    """Of 400 normal values the bootstrap interval of the mean is, within a few percent,
    mean +- z * standard error, z the normal quantile of the confidence level: 1.96 for the
    default 95%, 0.674 for 50%; the pair's interval likewise with the two samples' error."""
    values = np.random.default_rng(0).normal(10.0, 2.0, 400)
    members = [MemberSeries(f"m{i}", "G", 1, {1: float(v)}) for i, v in enumerate(values)]
    error = values.std(ddof=1) / np.sqrt(len(values))
    for asked in (None, 0.5):
        level = CONFIDENCE if asked is None else asked
        found = compare_at(members, 1) if asked is None else compare_at(
            members, 1, confidence=asked)
        (group,) = found.groups
        assert found.confidence == level
        assert group.ci_low is not None and group.ci_high is not None
        z = (group.ci_high - group.ci_low) / (2 * error)
        assert z == pytest.approx(stats.norm.ppf(0.5 + level / 2), rel=0.05), level
    second = [MemberSeries(f"n{i}", "H", 1, {1: float(v) + 1.0})
              for i, v in enumerate(values[200:])]
    (pair,) = compare_at([*members[:200], *second], 1).pairs
    assert pair.ci_low is not None and pair.ci_high is not None
    both = np.sqrt(values[:200].var(ddof=1) / 200 + values[200:].var(ddof=1) / 200)
    assert (pair.ci_high - pair.ci_low) / (2 * both) == pytest.approx(
        stats.norm.ppf(0.975), rel=0.05)
