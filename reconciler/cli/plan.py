"""CLI: `ouro plan`: what apply would do, changing nothing.

Thin by rule: parse, ask the fleet for the plan (``reconciler.engine.fleet``), render,
exit code. Plan never writes
anything but the plan file it is asked for (``-o``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli.options import Json, MaxSetMembers, Select, SpecPaths, StateDir


def plan_command(
    paths: SpecPaths,
    as_json: Json = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="print a pull-request comment")]
    = False,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="save the plan for apply")]
    = None,
    select: Select = None,
    state_dir: StateDir = None,
    max_set_members: MaxSetMembers = None,
) -> None:
    """Show what apply would do. Exit 0 all in sync, 2 changes pending, 1 error or refusal."""
    from reconciler.engine.fleet import Fleet
    from reconciler.report.render import plan_json, plan_markdown, print_plan

    if as_json and markdown:  # a usage error: exit 2 with the usage line
        raise typer.BadParameter("--json and --markdown cannot be used together",
                                 param_hint="--markdown")
    fleet = Fleet(state_dir, command="ouro plan", cached=True)
    plan, specs = fleet.plan_paths(paths, select)
    if out is not None:
        from reconciler.plan.saved import save_plan

        save_plan(plan, out, specs)
    chosen = []
    if any(spec.member is not None and spec.member.selection is not None for spec in specs):
        from reconciler.engine.selection import selections, table_reader

        chosen = selections(specs, table_reader(fleet, paths), fleet.state_dir)
    if as_json:
        text = plan_json(plan)
        if chosen:  # a selected set's decision beside the plan (docs/selection.md)
            text = json.dumps({**json.loads(text),
                               "selection": [one.as_json() for one in chosen]}, indent=2) + "\n"
        sys.stdout.write(text)
    elif markdown:
        sys.stdout.write(plan_markdown(plan))
    else:
        print_plan(plan)
        for one in chosen:
            sys.stdout.write("\n".join(one.lines()) + "\n")
    decided = any(not one.decision.waiting for one in chosen)
    # SystemExit: the code reaches the shell however the app is invoked (main(),
    # CliRunner, or a caller using standalone_mode=False, which returns typer.Exit codes).
    raise SystemExit(2 if decided and plan.exit_code == 0 else plan.exit_code)


def register(app: typer.Typer) -> None:
    app.command("plan", short_help='Show what apply would do, changing nothing.')(plan_command)
