"""A selected set's fitness per epoch (reconciler.report.epoch_fitness), the numbers `ouro
status` and the viewer's set page show: hand-written values, the best by the rule's
direction, an epoch without values, one value (no interval), and the same values read in
another order giving the same CI."""

from __future__ import annotations

from reconciler.report.epoch_fitness import EpochFitness, epoch_fitness


def test_count_best_and_mean_per_epoch_and_the_rules_direction() -> None:
    values = {1: {"a": 4.0, "b": 10.0, "c": 1.0}, 2: {"a": 7.0}, 3: {}}
    high = epoch_fitness(values, lowest=False)
    low = epoch_fitness(values, lowest=True)
    assert [(f.epoch, f.measured, f.best, f.mean) for f in high] == [
        (1, 3, 10.0, 5.0), (2, 1, 7.0, 7.0), (3, 0, None, None)]
    assert [f.best for f in low] == [1.0, 7.0, None]
    first = high[0]
    assert first.ci_low is not None and first.ci_high is not None
    assert first.ci_low <= 5.0 <= first.ci_high
    assert (high[1].ci_low, high[1].ci_high) == (None, None)  # one value: no interval
    assert high[2] == EpochFitness(3, 0, None, None, None, None)


def test_the_same_values_in_another_order_give_the_same_interval() -> None:
    named = {f"pop-{i}": float(value) for i, value in enumerate((3, 41, 5, 92, 6, 53))}
    backwards = dict(reversed(list(named.items())))
    assert list(backwards) != list(named)
    assert epoch_fitness({1: named}, False) == epoch_fitness({1: backwards}, False)
