"""A lineage's running totals: what its history adds up to, through each generation
(physics release 4). Trusted harness; pure (no I/O).

Rule: one home for what a generation counts for in a lineage's totals, shared by the
kernel, which records the totals through generation N in observation N
(``running_totals``), and by ``reconciler.state.summaries``, which derives the same
numbers from the whole history where no such record exists (lineages born before
release 4, the original instrument's):

- its status (changed / no-change / died, ``formats.status_of_outcome``);
- its death kind: a death's outcome (``process_exit``, ``signal``, ...);
- its model failure: a recorded ``provider_failure``, else the error of the first call
  when no call succeeded (``model_failure``);
- its spend: ``formats.calls_spend`` of its calls.

The record (``to_json``) is ``{"schema": "ouro-running-totals/v1", "generations": N,
"outcomes": {"changed": a, "no-change": b, "died": c}, "death_kinds": {kind: n, ...},
"model_failures": k, "spend_usd": "<decimal>"}``, death kinds sorted by name.
Discarded attempts' spend (``interrupted/``) is not in it: it is recorded between
generations, and readers add it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .formats import calls_spend, status_of_outcome, usd_amount

__all__ = [
    "MAX_CODE",
    "STATUSES",
    "TOTALS_KEY",
    "TOTALS_SCHEMA",
    "RunningTotals",
    "advance",
    "death_kind",
    "from_json",
    "model_failure",
    "to_json",
]

TOTALS_KEY = "running_totals"  # the observation's field
TOTALS_SCHEMA = "ouro-running-totals/v1"
STATUSES = ("changed", "no-change", "died")
MAX_CODE = 200  # a model failure's code beyond this is cut (a foreign record may hold anything)


@dataclass(frozen=True)
class RunningTotals:
    """A lineage's totals through some generation (``generations`` of them)."""

    generations: int = 0
    outcomes: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    death_kinds: Mapping[str, int] = field(default_factory=dict)
    model_failures: int = 0
    spend_usd: Decimal = Decimal(0)


def death_kind(outcome: str | None) -> str | None:
    """The death's kind (its outcome), or None for a generation that did not die."""
    died = outcome is not None and status_of_outcome(outcome) == "died"
    return outcome if died else None


def model_failure(record: Mapping[str, Any]) -> str | None:
    """Why the model gave a generation nothing (an error code), None if it did: the
    recorded ``provider_failure`` (a string, or an object with a ``code``/``kind``), else
    the error of the first call when no call succeeded."""
    failure = record.get("provider_failure")
    if isinstance(failure, str) and failure:
        return failure[:MAX_CODE]
    if isinstance(failure, dict):
        for key in ("code", "kind", "error", "class"):
            if isinstance(failure.get(key), str):
                return str(failure[key])[:MAX_CODE]
        return "provider_failure"
    calls = record.get("model_calls")
    dicts = [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []
    if not dicts or any(call.get("http_status") == 200 for call in dicts):
        return None
    for call in dicts:
        error = call.get("error")
        if isinstance(error, str) and error:
            return error[:MAX_CODE]
        status = call.get("http_status")
        if isinstance(status, int) and not isinstance(status, bool):
            return f"http_{status}"
    return "no_reply"


def advance(previous: RunningTotals, record: Mapping[str, Any]) -> RunningTotals:
    """The totals through the generation ``record`` observes, given those before it."""
    outcome = record.get("outcome")
    outcome = outcome if isinstance(outcome, str) else None
    status = status_of_outcome(outcome) if outcome is not None else None
    outcomes = dict(previous.outcomes)
    if status is not None:
        outcomes[status] += 1
    kinds = dict(previous.death_kinds)
    kind = death_kind(outcome)
    if kind is not None:
        kinds[kind] = kinds.get(kind, 0) + 1
    return RunningTotals(
        generations=previous.generations + 1,
        outcomes=outcomes,
        death_kinds=dict(sorted(kinds.items())),
        model_failures=previous.model_failures + (model_failure(record) is not None),
        spend_usd=previous.spend_usd + calls_spend(record.get("model_calls")),
    )


def to_json(totals: RunningTotals) -> dict[str, Any]:
    return {
        "schema": TOTALS_SCHEMA,
        "generations": totals.generations,
        "outcomes": {status: totals.outcomes[status] for status in STATUSES},
        "death_kinds": dict(sorted(totals.death_kinds.items())),
        "model_failures": totals.model_failures,
        "spend_usd": str(totals.spend_usd),
    }


def _count(value: object) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None  # type: ignore[return-value]


def from_json(value: object) -> RunningTotals | None:
    """The totals a record holds, or None unless it is exactly ``to_json``'s shape (schema,
    every count a non-negative integer, the outcomes adding up to ``generations``)."""
    if not isinstance(value, dict) or set(value) != {
            "schema", "generations", "outcomes", "death_kinds", "model_failures", "spend_usd"}:
        return None
    outcomes, kinds = value["outcomes"], value["death_kinds"]
    if (value["schema"] != TOTALS_SCHEMA or not isinstance(outcomes, dict)
            or set(outcomes) != set(STATUSES) or not isinstance(kinds, dict)):
        return None
    generations, failures = _count(value["generations"]), _count(value["model_failures"])
    counts = [_count(outcomes[status]) for status in STATUSES]
    kind_counts = {name: _count(count) for name, count in kinds.items()}
    spend = value["spend_usd"]
    amount = usd_amount(spend) if isinstance(spend, str) else None
    if (generations is None or failures is None or amount is None
            or any(count is None for count in (*counts, *kind_counts.values()))
            or sum(count or 0 for count in counts) > generations
            or sum(count or 0 for count in kind_counts.values()) > (counts[2] or 0)):
        return None
    return RunningTotals(
        generations=generations,
        outcomes={status: count or 0 for status, count in zip(STATUSES, counts, strict=True)},
        death_kinds={name: count or 0 for name, count in sorted(kind_counts.items())},
        model_failures=failures,
        spend_usd=amount,
    )
