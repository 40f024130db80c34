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
    from reconciler.spec.select import Selector
    from reconciler.spec.sets import Membership
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
    from reconciler.state.observe import observe
    from reconciler.state.status import read_status

    try:
        selectors = [parse(text) for text in select or ()]
        if paths:
            found = _from_specs(paths, selectors, state_dir)
        else:
            found = choose([_Named(item.name, item.paths, {})
                            for item in fleet([], state_dir)], selectors)
    except SelectorError as error:
        raise OuroError(f"ouro status: {error}") from None
    from reconciler.spec.load import state_dir as resolve_state_dir
    from reconciler.state.conditions import read_status as read_conditions

    controller = read_conditions(resolve_state_dir(state_dir))
    known = controller.lineages if controller is not None else {}
    cache = summary_cache_dir(state_dir)
    store = default_store(state_dir)
    lines = []
    for named in found:
        observed = observe(named.paths, cache)
        lines.append(StatusLine(named.name, read_status(named.paths, observed, cache),
                                paths=named.paths, labels=named.labels,
                                running=observed.running,
                                kernel=lineage_kernel(named.name, observed, store),
                                until=_until(named, observed), member=named.member,
                                conditions=known.get(named.name)))
    if as_json:
        sys.stdout.write(status_json(lines, controller))
    elif lines or controller is not None:
        print_status(lines, controller=controller)
    else:
        print("ouro status: no lineages", file=sys.stderr)


@dataclass(frozen=True)
class _Named:
    """A lineage, with the labels its spec gives it (none without a spec)."""

    name: str
    paths: LineagePaths
    labels: dict[str, str]
    spec: LoadedSpec | None = None  # its spec, when status was given specs
    member: Membership | None = None  # where it sits in its set (None: not in one)


def _from_specs(paths: list[Path], selectors: list[Selector],
                state_dir: Path | None) -> list[_Named]:
    """The chosen specs' lineages, each set's together cell by cell with its orphans (as
    plan shows them: ``reconciler.engine.sets``)."""
    from reconciler.engine.sets import grouped
    from reconciler.spec.load import load_specs
    from reconciler.spec.select import select as choose

    loaded = load_specs(paths, state_dir=state_dir)
    return [_Named(item.name, item.paths, item.spec.labels if item.spec else {}, item.spec,
                   item.member)
            for item in grouped(loaded, choose(loaded, selectors), state_dir)]


def _until(named: _Named, observed: Observed) -> UntilStop | None:
    """The spec's ``until`` condition that holds (as plan decides it), with a spec only."""
    from reconciler.plan.planner import shown_until

    if named.spec is None:
        return None
    return shown_until(named.spec, lambda: observed.probe_metrics, observed.generations)


def register(app: typer.Typer) -> None:
    app.command("status",
                short_help='What each lineage is now, and where it lives.')(status_command)
