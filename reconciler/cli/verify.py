"""CLI: `ouro verify PATH...`: the full-history audit of every lineage the specs name.

Thin: load specs, run the audit in its supervised child, render, exit
0 consistent / 1 findings or unknown.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from reconciler.cli.options import Json, SpecPaths, StateDir


def verify_command(
    paths: SpecPaths,
    as_json: Json = False,
    state_dir: StateDir = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="seconds before the audit is stopped (default: 600)",
                     min=1),
    ] = None,  # the engine's DEFAULT_TIMEOUT, imported in the command: start-up stays light
    full: Annotated[
        bool,
        typer.Option("--full", help="read every object again, whatever the last clean "
                     "audit recorded (finds damage that left a file's size and times alone)"),
    ] = False,
) -> None:
    """Audit both repositories of each lineage: exit 0 consistent, 1 findings or unknown.

    What the last clean audit of a lineage checked (recorded in <state dir>/.audits) is
    not read again while its object files are untouched: only what is new."""
    from reconciler.engine.fleet import Fleet
    from reconciler.engine.verify import DEFAULT_TIMEOUT, verify
    from reconciler.report.verify import verify_json, verify_text
    from reconciler.state.fleet import audit_record_dir

    fleet = Fleet(state_dir, command="ouro verify")
    loaded = fleet.load(paths)  # a SpecError is printed by cli.main
    parents = {spec.fork_parent.name: fleet.where(spec.fork_parent) for spec in loaded
               if spec.fork_parent is not None}
    report = verify([(spec.name, fleet.where(spec)) for spec in loaded],
                    timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
                    record_dir=audit_record_dir(state_dir), full=full, parents=parents)
    findings: list[str] = []
    if any(spec.member is not None and spec.member.selection is not None for spec in loaded):
        from reconciler.engine.selection_records import check

        findings = check(loaded, fleet.state_dir)  # the decisions (docs/selection.md)
    if as_json:
        text = verify_json(report)
        if findings:
            text = json.dumps({**json.loads(text), "selection": findings}, indent=2) + "\n"
        sys.stdout.write(text)
    else:
        sys.stdout.write(verify_text(report))
        sys.stdout.write("".join(f"{line}\n" for line in findings))
    raise SystemExit(1 if findings else report.exit_status)


def register(app: typer.Typer) -> None:
    app.command("verify", short_help='Audit both repositories of each lineage.')(verify_command)
