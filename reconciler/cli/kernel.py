"""CLI: `ouro kernel list|fetch|prune`: the kernel store (docs/kernel.md, "Pinned kernels").

Thin by rule: parse, ask the fleet (``reconciler.engine.fleet``: its store, the
lineages it knows) and the store's writer, render.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli.options import Json, StateDir
from reconciler.envelope import envelope
from reconciler.errors import OuroError
from reconciler.report.escape import terminal
from reconciler.report.words import plural

kernel_app = typer.Typer(
    name="kernel", no_args_is_help=True, rich_markup_mode=None,
    short_help="The kernel store: list, fetch and prune kernels.",
    help="The kernel store: every kernel that births or extends a lineage, kept exactly.",
)
Specs = Annotated[
    list[Path] | None,
    typer.Argument(help="spec files or folders whose lineages count as known (besides the "
                   "state dir's)"),
]


def _size(value: int) -> str:
    return f"{value / 1024:.0f} KiB" if value >= 1024 else f"{value} B"


@kernel_app.command("list", short_help='Every stored kernel and the lineages that need it.')
def list_command(specs: Specs = None, as_json: Json = False, state_dir: StateDir = None) -> None:
    """Every stored kernel: fingerprint, commits, the known lineages that need it, size."""
    from reconciler.engine.fleet import Fleet
    from reconciler.engine.kernel_store_writer import list_store

    fleet = Fleet(state_dir)
    store = fleet.store
    rows = list_store(store, fleet.known_needs(specs or []))
    if as_json:
        document = envelope("ouro-kernels", store=str(store.root),
                            kernels=[row.as_json() for row in rows])
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    print(terminal(f"kernel store {store.root}: {plural(len(rows), 'kernel')}"))
    for row in rows:
        state = f"DAMAGED: {row.damaged}" if row.damaged else _size(row.size)
        commits = ", ".join(c[:12] for c in row.commits) or "—"
        print(terminal(f"  {row.fingerprint[:16]}  {commits}  "
                       f"{state}  lineages: {', '.join(row.lineages) or 'none known'}"))


@kernel_app.command("fetch", short_help="Put COMMIT's kernel into the store.")
def fetch_command(
    commit: Annotated[str, typer.Argument(help="the commit whose kernel to fetch")],
    source: Annotated[
        str | None,
        typer.Option("--from", help="a git repository path, a bundle file or a URL (default: "
                     "the repository a known lineage records, else this ouro's checkout)"),
    ] = None,
    specs: Annotated[list[Path] | None, typer.Option("--specs", help="specs of lineages "
                                                     "stored outside the state dir")] = None,
    state_dir: StateDir = None,
) -> None:
    """Put COMMIT's kernel into the store, from a repository, a bundle or a URL."""
    from reconciler.engine.fleet import Fleet
    from reconciler.engine.kernel_store_writer import fetch
    from reconciler.state.kernel_store import checkout_repository

    fleet = Fleet(state_dir)
    where = (source or fleet.recorded_repository(commit, specs or [])
             or (str(checkout_repository()) if checkout_repository() else None))
    if where is None:
        raise OuroError(f"ouro kernel fetch: no repository known for {commit}: pass --from "
                        "PATH, BUNDLE or URL")
    entry = fetch(fleet.store, commit, where)
    print(terminal(f"kernel {entry.fingerprint} of commit {entry.commit} is in {entry.path}"))


@kernel_app.command("prune", short_help='Remove stored kernels no known lineage needs.')
def prune_command(
    specs: Specs = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only say what would go")] = False,
    state_dir: StateDir = None,
) -> None:
    """Remove stored kernels no known lineage needs (never this ouro's own)."""
    from reconciler.engine.fleet import Fleet
    from reconciler.engine.kernel_store_writer import prune
    from reconciler.state import instrument

    fleet = Fleet(state_dir)
    removed = prune(fleet.store, fleet.known_needs(specs or []),
                    keep=instrument.fingerprint(), dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for row in removed:
        print(terminal(f"{verb} {row.fingerprint[:16]} ({', '.join(c[:12] for c in row.commits)})"))
    print(f"{verb} {plural(len(removed), 'kernel')}")


def register(app: typer.Typer) -> None:
    app.add_typer(kernel_app)
