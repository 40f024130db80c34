"""CLI: `ouro status`: what each lineage is now. Reads only."""

from __future__ import annotations

import sys

import typer

from reconciler.cli.options import Json, SpecPaths, StateDir


def status_command(paths: SpecPaths, as_json: Json = False, state_dir: StateDir = None) -> None:
    """What each lineage is now: generations, outcomes, deaths, spend, journal, heads."""
    from reconciler.report.render import StatusLine, print_status, status_json
    from reconciler.spec.load import load_specs
    from reconciler.state.branches import spec_paths
    from reconciler.state.fleet import summary_cache_dir
    from reconciler.state.observe import observe, read_status

    specs = load_specs(paths, state_dir=state_dir)
    cache = summary_cache_dir(state_dir)
    lines = []
    for spec in specs:
        lineage = spec_paths(spec)
        lines.append(StatusLine(spec.name, read_status(lineage, observe(lineage), cache)))
    if as_json:
        sys.stdout.write(status_json(lines))
    else:
        print_status(lines)


def register(app: typer.Typer) -> None:
    app.command("status")(status_command)
