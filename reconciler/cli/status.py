"""CLI: `ouro status`: what each lineage is now, and where it lives. Reads only.

Its arguments are spec files or folders and lineage or set names, told apart and
resolved as every reading command's are (``reconciler.engine.chosen``). Without any:
every lineage found in the state dir (``--state-dir``, else the default), like
``terraform state list``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from reconciler.cli.options import Json, Select, StateDir


def status_command(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(help="spec files or folders (every *.yaml / *.yml under them), or "
                       "lineage or set names; none: every lineage in the state dir",
                       show_default=False, metavar="[PATH|NAME]..."),
    ] = None,
    as_json: Json = False,
    select: Select = None,
    state_dir: StateDir = None,
) -> None:
    """What each lineage is now: generations, outcomes, deaths, spend, journal, heads,
    labels, where it lives, and whether another apply is running it."""
    from reconciler.engine.fleet import Fleet
    from reconciler.report.render import print_status, status_json

    lines, controller, epochs = Fleet(state_dir, command="ouro status").status(arguments,
                                                                               select)
    if as_json:
        sys.stdout.write(status_json(lines, controller, epochs))
    elif lines or controller is not None:
        print_status(lines, controller=controller, epochs=epochs)
    else:
        print("ouro status: no lineages", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("status",
                short_help='What each lineage is now, and where it lives.')(status_command)
