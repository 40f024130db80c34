"""What `ouro verify` shows: the audit's verdict per lineage, in plain text."""

from __future__ import annotations

import json

from reconciler.engine.verify import LineageReport, VerifyReport
from reconciler.envelope import envelope
from reconciler.report.escape import json_text, terminal

_WHY_UNKNOWN = {
    "stopped": "the audit was stopped",
    "timeout": "the audit timed out",
    "refused": "the audit's report was refused (outside its schema or too large)",
    "failed": "the audit's child failed",
}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def _lineage_lines(lineage: LineageReport, outcome: str) -> list[str]:
    counts = (
        f"{_plural(lineage.generations, 'generation')}, "
        f"{_plural(lineage.observations, 'observation')}"
    )
    if lineage.status == "consistent":
        if lineage.resumed:
            fresh = lineage.generations - lineage.resumed
            counts += (f"; {_plural(fresh, 'new generation')} read, the earlier "
                       f"{lineage.resumed} as the last clean audit left them (--full reads all)")
        return [f"{lineage.lineage}: consistent ({counts})", *_ancestry_lines(lineage)]
    if lineage.status == "unknown":
        why = _WHY_UNKNOWN.get(outcome, "its history could not be read")
        detail = f" ({lineage.exception_class})" if lineage.exception_class else ""
        return [f"{lineage.lineage}: unknown: {why}{detail}; not an accusation"]
    lines = [f"{lineage.lineage}: {_plural(lineage.findings_total, 'finding')} ({counts})"]
    for finding in lineage.findings:
        where = f"gen {finding.generation}" if finding.generation is not None else "lineage"
        lines.append(f"  {where}: {finding.code}: {finding.description}")
    hidden = lineage.findings_total - len(lineage.findings)
    if hidden > 0:
        lines.append(f"  ... and {hidden} more")
    return lines + _ancestry_lines(lineage)


_ANCESTRY = {
    "linked": "ancestry: the parent's generation is the recorded commit, and its tree is "
              "this fork's seed",
    "parent-not-present": "ancestry: parent not present (the link is not checked; name the "
                          "parent's spec, or keep it in the state dir)",
    "broken": "ancestry: broken (the findings above)",
}


def _ancestry_lines(lineage: LineageReport) -> list[str]:
    return [f"  {_ANCESTRY[lineage.ancestry]}"] if lineage.ancestry in _ANCESTRY else []


def verify_text(report: VerifyReport) -> str:
    """One line per consistent or unknown lineage, one per finding, then the verdict."""
    lines: list[str] = []
    for lineage in report.lineages:
        lines.extend(_lineage_lines(lineage, report.outcome))
    lines.append(f"ouro verify: {report.status}")
    return terminal("\n".join(lines) + "\n")


def verify_json(report: VerifyReport) -> str:
    """The audit's report, under the format_version and kind every JSON document has."""
    document = envelope("ouro-verify", **report.as_dict())
    return json_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
