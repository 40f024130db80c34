"""The streaks read back from a lineage's newest observations (``state.failures``): deaths
in a row (the controller's notification) and generations whose every model call failed
(apply's stop), each bounded, and ended, never raised, by what cannot be read."""

from __future__ import annotations

import shutil
from pathlib import Path

from reconciler.state.failures import died_streak, failed_streak
from tests.observe.builder import LineageBuilder

FAILED = {"every_call_failed": True, "code": "HTTP 503"}


def _grown(root: Path) -> LineageBuilder:
    """gen 1 changed, 2 died (its calls failed), 3 and 4 died, 5 no-change with every call
    failed, 6 too."""
    builder = LineageBuilder(root)
    builder.gen("changed")
    builder.gen("died", provider_failure=FAILED)
    builder.gen("died")
    builder.gen("died")
    builder.gen(provider_failure=FAILED)
    builder.gen(provider_failure=FAILED)
    return builder


def test_the_deaths_in_a_row_are_counted_back_from_the_newest(tmp_path: Path) -> None:
    paths = _grown(tmp_path).paths
    assert died_streak(paths, 4, limit=10) == 3  # gens 4, 3, 2; gen 1 changed
    assert died_streak(paths, 4, limit=2) == 2  # bounded
    assert died_streak(paths, 6, limit=10) == 0  # the newest lived
    assert died_streak(paths, 1, limit=10) == 0
    assert died_streak(paths, 0, limit=10) == 0  # before the first generation


def test_the_failed_generations_in_a_row_are_counted_the_same_way(tmp_path: Path) -> None:
    paths = _grown(tmp_path).paths
    assert failed_streak(paths, 6, limit=10) == 2  # gens 6, 5; gen 4's calls did not fail
    assert failed_streak(paths, 2, limit=10) == 1
    assert failed_streak(paths, 6, limit=1) == 1


def test_an_unreadable_history_ends_the_count_and_raises_nothing(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    shutil.rmtree(builder.paths.observations / ".git" / "objects")
    assert died_streak(builder.paths, 4, limit=10) == 0
    assert failed_streak(builder.paths, 6, limit=10) == 0
    shutil.rmtree(builder.paths.observations)
    assert died_streak(builder.paths, 4, limit=10) == 0
