"""When an apply audits the lineages it ran (``engine.audits``): in batches of about a
quarter of its fleet while generations still run, and never keeping the last ones
waiting (each batch is a child's start, ~0.08 s of CPU)."""

from __future__ import annotations

from reconciler.engine.audits import batch_ready


def _batches(expected: int, finishing: list[int]) -> list[int]:
    """The batches launched when lineages finish in groups of ``finishing`` (each earlier
    batch done by then), as ``AuditBatches.lineage_done`` decides; what is left waits for
    the apply's end (``finish``), which launches it whatever its size."""
    batches, waiting, launched = [], 0, 0
    for group in finishing:
        for _ in range(group):
            waiting += 1
            if batch_ready(waiting, expected - launched, expected):
                batches.append(waiting)
                launched += waiting
                waiting = 0
    return batches + ([waiting] if waiting else [])


def test_one_lineage_is_audited_as_soon_as_it_is_done() -> None:
    assert _batches(1, [1]) == [1]
    assert batch_ready(1, 1, 1)


def test_a_fleet_ending_one_by_one_makes_four_batches_not_one_per_lineage() -> None:
    assert _batches(32, [1] * 32) == [8, 8, 8, 8]
    assert _batches(10, [1] * 10) == [3, 3, 3, 1]  # the last one never waits for more


def test_the_last_lineages_are_audited_when_all_are_done() -> None:
    assert batch_ready(2, 2, 32)  # two left, both done: a batch of two
    assert not batch_ready(2, 3, 32)  # two of three: wait for the third (or the end)


def test_no_batch_is_larger_than_a_quarter_while_others_run() -> None:
    """(A batch running when more end: they wait for it, and for the next to end.)"""
    assert _batches(32, [32]) == [8, 8, 8, 8]
    assert _batches(5, [5]) == [2, 2, 1]
