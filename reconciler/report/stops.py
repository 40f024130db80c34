"""Why a lineage has stopped (or will be stopped), from what its newest generation recorded.

No rule is declared here: the rule is ``reconciler.plan.continuation.decide``
(the one apply follows after every generation), fed as apply feeds it: the
newest observation's ``provider_failure`` and ``usage_exceeds_request``, and
the run of generations before it whose every call failed
(``reconciler.state.failures.failed_streak``). The spec's
``max_failed_generations`` and key variable are known only when the viewer was
given the lineage's spec; without it only what is certain is said: a final
failure or impossible usage stops a lineage whatever the spec says, and a run
of failed generations is shown as a count, not as a stop.

A stop apply made before the next generation (``provider-unavailable``,
``replay-exhausted``) has no generation to read it from: it is read from the record
apply left for it (``reconciler.state.stops``), while the lineage's heads are the ones
it names.

A selected set's member a decision stopped (``not-selected``) is stopped by the
decision's record, not by anything it recorded itself: ``reconciler.report.not_selected``
says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.kernel.base.config import LineagePaths
from reconciler.plan.continuation import decide
from reconciler.report.calls import MAX_TEXT
from reconciler.report.words import plural
from reconciler.spec.models import ModelSpec
from reconciler.state.failures import failed_streak
from reconciler.state.history import record
from reconciler.state.stops import read_stop
from reconciler.state.summaries import LineageSummary

__all__ = ["STREAK_LIMIT", "Stopped", "lineage_stop"]

# Without a spec no run of failed generations stops a lineage in what is shown
# (decide's third rule never fires); the run is counted up to this many.
STREAK_LIMIT = 1000


@dataclass(frozen=True)
class Stopped:
    """Apply stops (or stopped) the lineage after ``generation``, or a run of failures."""

    generation: int
    code: str | None  # decide's code; None: only a run of failed generations, not a stop
    message: str
    failed_in_a_row: int
    certain: bool  # decided with the spec's own max_failed_generations and key
    before_next: bool = False  # apply stopped it before generation ``generation + 1``


def _failure(value: Any) -> dict[str, Any] | None:
    """The recorded failure's keys ``decide`` reads, each only with its recorded type and
    bounded (a foreign writer may have put anything there); None when not an object."""
    if not isinstance(value, dict):
        return None
    kept: dict[str, Any] = {}
    for key in ("code", "message"):
        if isinstance(value.get(key), str):
            kept[key] = value[key][:MAX_TEXT]
    status = value.get("http_status")
    kept["http_status"] = status if isinstance(status, int) and not isinstance(status, bool) \
        else None
    for key in ("stops_lineage", "every_call_failed", "retryable"):
        kept[key] = value.get(key) is True
    return kept


def lineage_stop(paths: LineagePaths, summary: LineageSummary,
                 model: ModelSpec | None) -> Stopped | None:
    """Why apply stopped the lineage before its next generation (its record), else what
    the newest generation says about going on (None: nothing stops it)."""
    recorded = read_stop(paths)
    if recorded is not None and recorded.generation == (
            summary.rows[-1].generation if summary.rows else 0):
        return Stopped(recorded.generation, recorded.reason, recorded.message,
                       0, True, before_next=True)
    if not summary.rows or not summary.rows[-1].observed:
        return None
    newest = summary.rows[-1].generation
    found = record(paths, newest)
    if found is None:
        return None
    failure = _failure(found.get("provider_failure"))
    usage = found.get("usage_exceeds_request") is True
    limit = model.max_failed_generations if model is not None else STREAK_LIMIT
    streak = failed_streak(paths, newest, limit)
    name = model.name if model is not None else str(found.get("model") or "?")
    stop = decide(failure, usage, failed_in_a_row=streak,
                  max_failed=limit if model is not None else STREAK_LIMIT + 1,
                  variable=model.api_key_env if model is not None else None, model=name)
    if stop is not None:
        message = stop.message
        if model is None and failure is not None and stop.code == failure.get("code"):
            message = (f"model unavailable ({stop.code}): {failure.get('message') or ''}; "
                       "a final failure; the lineage's spec names the key or model to fix "
                       "(give `ouro view` the spec to see the remedy)")
        return Stopped(newest, stop.code, message, streak, model is not None)
    if streak:
        known = (f" (it stops at {model.max_failed_generations})" if model is not None
                 else " (whether apply stops it depends on the spec's "
                      "max_failed_generations, not known here)")
        return Stopped(newest, None, f"the last {plural(streak, 'generation')} had every model "
                                     f"call fail{known}", streak, model is not None)
    return None

