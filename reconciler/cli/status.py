"""CLI: `ouro status`: what each lineage is now, and where it lives. Reads only.

With specs: their lineages. Without: every lineage found in the state dir
(``--state-dir``, else the default), like ``terraform state list``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reconciler.cli.options import Json, Select, StateDir
from reconciler.errors import OuroError

if TYPE_CHECKING:
    from reconciler.kernel.base.config import LineagePaths
    from reconciler.plan.probes import UntilStop
    from reconciler.spec.load import LoadedSpec
    from reconciler.state.observe import Observed


def status_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="spec files or folders (every *.yaml / *.yml under them); "
                       "none: every lineage in the state dir", show_default=False),
    ] = None,
    as_json: Json = False,
    select: Select = None,
    state_dir: StateDir = None,
) -> None:
    """What each lineage is now: generations, outcomes, deaths, spend, journal, heads,
    labels, where it lives, and whether another apply is running it."""
    from reconciler.engine.kernel_store_writer import default_store, lineage_kernel
    from reconciler.report.render import StatusLine, print_status, status_json
    from reconciler.spec.select import SelectorError, parse
    from reconciler.spec.select import select as choose
    from reconciler.state.fleet import fleet, summary_cache_dir
    from reconciler.state.observe import observe, read_status

    if paths:
        from reconciler.spec.load import load_specs
        from reconciler.state.branches import spec_paths

        found = [_Named(spec.name, spec_paths(spec), spec.labels, spec)
                 for spec in load_specs(paths, state_dir=state_dir)]
    else:
        found = [_Named(item.name, item.paths, {}) for item in fleet([], state_dir)]
    try:
        found = choose(found, [parse(text) for text in select or ()])
    except SelectorError as error:
        raise OuroError(f"ouro status: {error}") from None
    cache = summary_cache_dir(state_dir)
    store = default_store(state_dir)
    lines = []
    for named in found:
        observed = observe(named.paths)
        lines.append(StatusLine(named.name, read_status(named.paths, observed, cache),
                                paths=named.paths, labels=named.labels,
                                running=observed.running,
                                kernel=lineage_kernel(named.name, observed, store),
                                until=_until(named, observed)))
    if as_json:
        sys.stdout.write(status_json(lines))
    elif lines:
        print_status(lines)
    else:
        print("ouro status: no lineages", file=sys.stderr)


@dataclass(frozen=True)
class _Named:
    """A lineage, with the labels its spec gives it (none without a spec)."""

    name: str
    paths: LineagePaths
    labels: dict[str, str]
    spec: LoadedSpec | None = None  # its spec, when status was given specs


def _until(named: _Named, observed: Observed) -> UntilStop | None:
    """The spec's ``until`` condition that holds (as plan decides it), with a spec only."""
    from reconciler.plan.planner import desired_generations, until_of

    if named.spec is None or observed.generations >= desired_generations(named.spec):
        return None
    return until_of(named.spec, observed, observed.generations)


def register(app: typer.Typer) -> None:
    app.command("status",
                short_help='What each lineage is now, and where it lives.')(status_command)
