"""CLI: `ouro reproduce NAME [--to GEN]`: the lineage's recorded history run again.

Thin: one engine call (``engine.reproduce.reproduce``), render, exit 0 reproduced /
1 diverged or refused (an error, such as an unknown name, exits 1 too).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli.options import Json, StateDir


def reproduce_command(
    name: Annotated[str, typer.Argument(help="the lineage to reproduce", show_default=False)],
    to: Annotated[int | None, typer.Option(
        "--to", min=1, help="reproduce generations 1..GEN only (default: every one)")] = None,
    as_json: Json = False,
    specs: Annotated[list[Path] | None, typer.Option(
        "--specs", help="spec files or folders naming the lineage (else the state dir's, "
        "by name)")] = None,
    state_dir: StateDir = None,
    scratch: Annotated[Path | None, typer.Option(
        "--scratch", help="the folder the scratch lineage is made in, and removed from "
        "(default: the system's temporary folder)")] = None,
) -> None:
    """Run a lineage's recorded history again in a scratch place, under its own pinned
    kernel and recorded ceilings, every model call answered from the record (no network,
    no key, no spend), and compare each generation with the record: exit 0 when every
    generation came out as recorded, 1 at the first that did not (or when the lineage
    cannot be reproduced, with the reason). The lineage itself is only read."""
    from reconciler.engine.reproduce import ReproduceRequest, reproduce
    from reconciler.report.reproduce import reproduce_json, reproduce_text

    verdict = reproduce(ReproduceRequest(name, to=to, specs=tuple(specs or ()),
                                         state_dir=state_dir, scratch=scratch))
    sys.stdout.write(reproduce_json(verdict) if as_json else reproduce_text(verdict))
    raise SystemExit(verdict.exit_code)


def register(app: typer.Typer) -> None:
    app.command("reproduce", short_help="Run a lineage's recorded history again and "
                "compare.")(reproduce_command)
