"""CLI: `ouro validate PATH...`: load and check specs, every problem on stderr."""

from __future__ import annotations

import sys

import typer

from reconciler.cli.options import MaxSetMembers, SpecPaths, StateDir
from reconciler.errors import SpecError


def validate(paths: SpecPaths, state_dir: StateDir = None,
             max_set_members: MaxSetMembers = None) -> None:
    """Load and check specs: exit 0 when all are valid, 1 with every problem on stderr."""
    from reconciler.report.escape import terminal
    from reconciler.spec.load import load_specs

    try:
        loaded = load_specs(paths, state_dir=state_dir)
    except SpecError as error:
        for problem in error.problems:
            print(terminal(str(problem)), file=sys.stderr)
        files = len({problem.file for problem in error.problems})
        count = len(error.problems)
        print(
            f"ouro validate: {count} problem{'s' * (count != 1)} in {files} "
            f"file{'s' * (files != 1)}",
            file=sys.stderr,
        )
        raise typer.Exit(1) from None
    files = len({spec.file for spec in loaded})
    names = ", ".join(spec.name for spec in loaded)
    print(
        f"ok: {len(loaded)} lineage{'s' * (len(loaded) != 1)} in {files} "
        f"file{'s' * (files != 1)}: {names}"
    )


def register(app: typer.Typer) -> None:
    app.command("validate", short_help='Check specs: every problem, with its place.')(validate)
