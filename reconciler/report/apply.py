"""What `ouro apply` shows at the end: its JSON report, or a summary in plain text."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from reconciler.engine.apply import LineageResult
from reconciler.engine.session import ApplyOutcome
from reconciler.envelope import envelope
from reconciler.plan.probes import GOAL_STOPS
from reconciler.report.escape import json_text, terminal
from reconciler.report.words import plural

KIND = "ouro-apply"  # (reconciler.envelope)


def apply_document(outcome: ApplyOutcome) -> dict[str, Any]:
    return envelope(KIND, interrupted=outcome.interrupted, stopped_by=outcome.stopped_by,
                    lineages=[result.as_json() for result in outcome.lineages])


def apply_json(outcome: ApplyOutcome) -> str:
    return json_text(json.dumps(apply_document(outcome), indent=2, sort_keys=True) + "\n")


def refusal_json(message: str) -> str:
    """The JSON report of an apply refused before any lineage ran (bad specs, an
    untrusted lock, an unknown partition, ...): no lineages, the message as ``error``."""
    document = envelope(KIND, interrupted=False, stopped_by=None, lineages=[], error=message)
    return json_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


# Why an audit's verdict is unknown (its outcome), said after `verify: unknown`.
_WHY_UNKNOWN = {
    "interrupted": "the audit was stopped by the interrupt: run `ouro verify` for a verdict",
    "stopped": "the audit was stopped: run `ouro verify` for a verdict",
    "timeout": "the audit did not finish in time: run `ouro verify` for a verdict",
    "refused": "the audit's report was refused (outside its schema or too large)",
    "failed": "the audit's child failed: run `ouro verify` to see why",
}


def _audit_line(audit: dict[str, Any]) -> str:
    findings = "; ".join(audit.get("findings") or ())
    if findings:
        return f"  verify: {audit['status']} ({findings})"
    if audit.get("status") == "unknown":
        why = _WHY_UNKNOWN.get(str(audit.get("why")), "the audit gave no verdict: run "
                                                        "`ouro verify` for one")
        return f"  verify: unknown ({why})"
    return f"  verify: {audit['status']}"


def _lineage_lines(result: LineageResult) -> list[str]:
    """One lineage's outcome: where it is now, what ran, then its refusal, errors, audit."""
    counts = ", ".join(f"{n} {k}" for k, n in sorted(result.outcomes.items()))
    now = result.final_action or result.planned_action
    have = "?" if result.final_generations is None else str(result.final_generations)
    lines = [f"{result.name}: {now}, {have} of "
             f"{plural(result.desired_generations, 'generation')}; "
             f"ran {result.generations_run}" + (f" ({counts})" if counts else "")
             + f", spent ${result.spend_usd}"]
    if result.stopped in GOAL_STOPS:
        lines.append(f"  done ({result.stopped}): spec.until holds; apply runs no more")
    if result.measured:
        lines.append(f"  measured: {result.measured} probe record(s), "
                     f"{result.probe_failures} probe failure(s)")
    if result.refusal:
        lines.append(f"  refused: {result.refusal}")
    lines.extend(f"  error: {error}" for error in result.errors)
    if result.audit is not None:
        lines.append(_audit_line(result.audit))
    return lines


def _failures_line(results: list[LineageResult]) -> str | None:
    """Every lineage that spent generations of this apply on model failures, or None."""
    spent = []
    for result in results:
        if not result.model_failures:
            continue
        last = result.last_model_failure or {}
        where = f"gen {last['generation']}, " if isinstance(last.get("generation"), int) else ""
        stopped = f"; stopped: {result.stopped}" if result.stopped else ""
        spent.append(f"{result.name} {plural(result.model_failures, 'generation')} "
                     f"(last: {where}{last.get('code') or 'model unavailable'}{stopped})")
    if not spent:
        return None
    return "Generations spent on model failures: " + "; ".join(spent) + "."


def apply_summary(outcome: ApplyOutcome) -> str:
    """Every lineage's outcome (an internal error included), the totals, why it stopped
    early, a log failure."""
    lines = []
    for result in outcome.lineages:
        lines.extend(_lineage_lines(result))
    ran = sum(result.generations_run for result in outcome.lineages)
    spent = sum((result.spend_usd for result in outcome.lineages), Decimal(0))
    failures = _failures_line(outcome.lineages)
    if failures:
        lines.append(failures)
    line = f"Applied: {plural(ran, 'generation')} run, ${spent} spent."
    if outcome.stopped_by:
        line += f" Stopped early ({outcome.stopped_by}); the next apply continues."
    lines.append(line)
    if outcome.event_log_failed:
        lines.append(
            f"ouro: warning: the event log could not be written ({outcome.event_log_failed})")
    return terminal("\n".join(lines) + "\n")
