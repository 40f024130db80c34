"""What ``ouro status`` shows of one lineage: its whole history's totals. Read-only.

Rule: O(1) in the history when the lineage's summary (``state.summaries``) is cached
for today's heads, else it is extended or rebuilt (every generation read once). What
observe found is reused: the branches it read, its problems, and the heads it found
whole (not checked again). Never raises for a damaged lineage.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from reconciler.kernel.base.config import LineagePaths
from reconciler.state.observe import Observed
from reconciler.state.summaries import Totals, totals

__all__ = ["StatusReport", "read_status"]


@dataclass(frozen=True)
class StatusReport:
    """What `ouro status` shows of one lineage: reads every observation."""

    generations: int
    outcomes: dict[str, int]  # changed / no-change / died (from the lineage commits)
    death_kinds: dict[str, int]  # process_exit, signal, ... (from observations)
    accounted_usd: str  # Decimal as text: sum of model_calls accounted_usd
    last_journal_heading: str | None
    lineage_head: str | None
    observation_head: str | None
    observed_generations: int
    problems: tuple[str, ...]
    model_failures: int = 0  # generations whose observation records a provider_failure
    last_model_failure: dict[str, Any] | None = None  # the newest generation's, if it failed
    generation_running: tuple[str, ...] = ()  # a generation running now (not a problem)


def read_status(paths: LineagePaths, observed: Observed,
                cache_dir: Path | None = None) -> StatusReport:
    """Outcomes, death kinds and spend over the whole history. Never raises.

    Derived from the lineage's summary (``reconciler.state.summaries``), which is
    cached in ``cache_dir`` (when given) and extended incrementally.
    """
    # The branches observe read: the lineage's own, even when the spec names another.
    read = replace(
        paths,
        branch=observed.branches_read.get("lineage") or paths.branch,
        observation_branch=observed.branches_read.get("observation") or paths.observation_branch,
    )
    whole = (observed.lineage_head, observed.observation_head)  # observe checked them
    summary = Totals(0, {}, {}, 0, Decimal(0), None, None, None) if observed.newest_unreadable \
        else totals(read, cache_dir, whole=whole)  # else: read nothing
    # a generation running now is not a problem: status shows it as running
    problems = [p.message for p in observed.problems if p.code != "generation-running"] \
        + list(summary.problems)
    running = tuple(p.message for p in observed.problems if p.code == "generation-running")
    return StatusReport(
        generations=summary.generations if summary.lineage_head else observed.generations,
        outcomes=summary.outcomes,
        death_kinds=summary.death_kinds,
        accounted_usd=str(summary.spend_usd),
        last_journal_heading=summary.journal_heading,
        lineage_head=observed.lineage_head,
        observation_head=observed.observation_head,
        observed_generations=observed.observed_generations,
        problems=tuple(dict.fromkeys(problems)),
        generation_running=running,
        model_failures=summary.model_failures,
        last_model_failure=_last_failure(observed.last_observation),
    )


def _last_failure(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The newest generation's ``provider_failure``, with its ``generation``, or None."""
    failure = record.get("provider_failure") if isinstance(record, dict) else None
    if not isinstance(failure, dict):
        return None
    number = record.get("generation") if isinstance(record, dict) else None
    return dict(failure, generation=number if isinstance(number, int) else None)
