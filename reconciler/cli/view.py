"""CLI: `ouro view [PATH...]`: the local, read-only web viewer of a fleet.

Thin: find the lineages (the specs', else the state dir's), start the
viewer's server on a loopback address with a random token, print the URL
that carries it, serve until interrupted. Needs the ``view`` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli.options import StateDir
from reconciler.errors import OuroError

VIEW_MODULES = ("starlette", "uvicorn", "jinja2", "matplotlib")


def _require_libraries() -> None:
    import importlib.util

    missing = [name for name in VIEW_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise OuroError(
            f"ouro view: the viewer needs {', '.join(missing)}, which are not installed; "
            "install them from a checkout with: pip install -c constraints.txt -e '.[view]' "
            "(or pip install 'ouro-lineages[view]')")


def view_command(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="spec files or folders (else every lineage in the state dir)")] = None,
    host: Annotated[str | None, typer.Option(
        "--host", help="address to bind (default: a random address of 127.0.0.0/8, so that "
        "the viewer's cookie reaches no other local server)", show_default=False)] = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="port (0: any free one)")] = 0,
    state_dir: StateDir = None,
) -> None:
    """Serve a read-only web view of the fleet: progress, spend, deaths, timelines, diffs,
    journal entries and plots; the printed URL carries the access token."""
    _require_libraries()
    from reconciler.viewer.server import serve

    serve(list(paths or []), state_dir=state_dir, host=host, port=port)


def register(app: typer.Typer) -> None:
    app.command("view", short_help='Serve a read-only web view of the fleet.')(view_command)
