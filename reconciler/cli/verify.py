"""CLI: `ouro verify [PATH|NAME...]`: the full-history audit of every lineage the specs or
names name (``reconciler.engine.chosen``), else of every lineage in the state dir.

Thin: resolve the lineages, run the audit in its supervised child, render, exit
0 consistent / 1 findings or unknown.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from reconciler.cli.options import Json, Select, StateDir


def verify_command(
    arguments: Annotated[list[str] | None, typer.Argument(
        help="spec files or folders, or lineage or set names; none: every lineage in the "
        "state dir", show_default=False, metavar="[PATH|NAME]...")] = None,
    as_json: Json = False,
    select: Select = None,
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
    chosen = fleet.chosen(arguments or (), select=select)  # a SpecError: printed by cli.main
    if not chosen:
        print("ouro verify: no lineages", file=sys.stderr)
        return
    parents = {item.spec.fork_parent.name: fleet.where(item.spec.fork_parent)
               for item in chosen if item.spec is not None and item.spec.fork_parent}
    if any(item.spec is None for item in chosen):  # a fork without its spec: any parent
        parents = {**{item.name: item.paths for item in fleet.every_lineage()}, **parents}
    report = verify([(item.name, item.paths) for item in chosen],
                    timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
                    record_dir=audit_record_dir(state_dir), full=full, parents=parents)
    findings: list[str] = []
    loaded = [item.spec for item in chosen if item.spec is not None]
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
