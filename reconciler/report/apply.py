"""What `ouro apply` shows at the end: its JSON report, or a summary in plain text."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from reconciler.engine.session import ApplyOutcome

REPORT_FORMAT = "ouro-apply-report/v1"


def apply_document(outcome: ApplyOutcome) -> dict[str, Any]:
    return {
        "format_version": REPORT_FORMAT,
        "interrupted": outcome.interrupted,
        "stopped_by": outcome.stopped_by,
        "lineages": [result.as_json() for result in outcome.lineages],
    }


def apply_json(outcome: ApplyOutcome) -> str:
    return json.dumps(apply_document(outcome), indent=2, sort_keys=True) + "\n"


def apply_summary(outcome: ApplyOutcome) -> str:
    """Each audited lineage's verdict, the totals, why it stopped early, a log failure."""
    lines = []
    for result in outcome.lineages:
        if result.audit is not None:
            findings = "; ".join(result.audit["findings"])
            lines.append(f"{result.name}: verify: {result.audit['status']}"
                         + (f" ({findings})" if findings else ""))
    ran = sum(result.generations_run for result in outcome.lineages)
    spent = sum((result.spend_usd for result in outcome.lineages), Decimal(0))
    line = f"Applied: {ran} generations run, ${spent} spent."
    if outcome.stopped_by:
        line += f" Stopped early ({outcome.stopped_by}); the next apply continues."
    lines.append(line)
    if outcome.event_log_failed:
        lines.append(
            f"ouro: warning: the event log could not be written ({outcome.event_log_failed})")
    return "\n".join(lines) + "\n"
