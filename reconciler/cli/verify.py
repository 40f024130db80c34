"""CLI: `ouro verify PATH...`: the full-history audit of every lineage the specs name.

Thin: load specs, run the audit in its supervised child, render, exit
0 consistent / 1 findings or unknown.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.engine.verify import DEFAULT_TIMEOUT, LineageReport, VerifyReport, verify
from reconciler.spec.load import load_specs

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
        return [f"{lineage.lineage}: consistent ({counts})"]
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
    return lines


def render(report: VerifyReport) -> str:
    lines: list[str] = []
    for lineage in report.lineages:
        lines.extend(_lineage_lines(lineage, report.outcome))
    lines.append(f"ouro verify: {report.status}")
    return "\n".join(lines) + "\n"


def verify_command(
    paths: Annotated[
        list[Path], typer.Argument(help="spec files or folders (every *.yaml/*.yml below)")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", help="where lineages live by default (else OURO_STATE_DIR)"),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="seconds before the audit is stopped", min=1)
    ] = DEFAULT_TIMEOUT,
) -> None:
    """Audit both repositories of each lineage: exit 0 consistent, 1 findings or unknown."""
    loaded = load_specs(paths, state_dir=state_dir)  # a SpecError is printed by cli.main
    report = verify([(spec.name, spec.paths()) for spec in loaded], timeout=timeout)
    if as_json:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render(report))
    raise SystemExit(report.exit_status)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_command)
