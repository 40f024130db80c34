"""CLI: concluding from an experiment. `ouro compare`, `ouro best`, `ouro cat`.

Thin by rule: read the lineages' per-generation rows (``reconciler.engine.compare_rows``),
compute with ``reconciler.report.statistics`` (scipy and numpy are imported only when a
comparison runs), render with ``reconciler.report.compare`` and ``report.figure``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reconciler.cli.options import Json, Select, SpecPaths, StateDir
from reconciler.errors import OuroError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from reconciler.engine.compare_rows import LineageRows
    from reconciler.report.statistics import MemberSeries

MetricOption = Annotated[str | None, typer.Option(
    "--metric", help="a per-generation column of `ouro export`: probe.NAME.METRIC, "
    "organism_bytes, spend_usd, ... (default: the first probe column, else organism_bytes)")]
SpecsOption = Annotated[list[Path] | None, typer.Option(
    "--specs", help="spec files or folders naming the lineage (else the state dir's "
    "lineages, by name)")]


def _metric(chosen: str | None, found: list[LineageRows], command: str) -> str:
    from reconciler.report.compare import check_metric, metric_columns

    if chosen is None:
        probes = [name for name in metric_columns(found) if name.startswith("probe.")]
        chosen = probes[0] if probes else "organism_bytes"
    check_metric(chosen, found, command)
    return chosen


def _generation(at: str, found: list[LineageRows]) -> int:
    if at == "last":
        lasts = [item.last for item in found if item.last is not None]
        return max(lasts) if lasts else 0
    if not at.isdigit():
        raise typer.BadParameter(f"{at!r} is neither a generation number nor 'last'",
                                 param_hint="--at")
    return int(at)


def _write(path: Path, data: bytes, what: str, command: str) -> None:
    from reconciler.errors import host_fault
    from reconciler.ownfiles import write_atomic

    try:
        write_atomic(path, data, what=what, follow=True, mode=0o666)
    except OSError as error:
        raise host_fault(error, f"writing {path}") or OuroError(
            f"{command}: cannot write {path}: {error.strerror}") from error


def _plot(path: Path, members: Sequence[MemberSeries], metric: str, last: int,
          carry_last: bool) -> None:
    from reconciler.report.figure import figure_bytes, format_of
    from reconciler.report.statistics import series

    fmt = format_of(path)
    assert fmt is not None  # checked before anything was read
    points = series(members, range(0, last + 1), carry_last=carry_last)
    _write(path, figure_bytes(points, metric, fmt), "the figure", "ouro compare")


def compare_command(
    paths: SpecPaths,
    metric: MetricOption = None,
    at: Annotated[str, typer.Option(
        "--at", help="the generation compared: a number (0 is the seed) or last (the "
        "newest any member reached)")] = "last",
    select: Select = None,
    by: Annotated[str | None, typer.Option(
        "--by", help="group by this label's value (default: by set cell; a plain lineage "
        "is its own group)")] = None,
    as_json: Json = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="write the figure over generations to FILE.svg, FILE.pdf (vector) "
        "or FILE.png")] = None,
    carry_last: Annotated[bool, typer.Option(
        "--carry-last", help="read a member whose history ended before the generation at "
        "its last measured one (default: it is out of n)")] = False,
    state_dir: StateDir = None,
) -> None:
    """Is one group different from another, by how much, how sure: per group n, mean,
    median, a 95% bootstrap CI, min, max and who is alive; per pair the difference of
    means with its CI and a Mann-Whitney p-value (docs/compare.md)."""
    from reconciler.engine.compare_rows import lineage_rows
    from reconciler.report.compare import compare_json, compare_text, members_of
    from reconciler.report.figure import FORMATS, format_of
    from reconciler.report.statistics import compare_at

    if plot is not None and format_of(plot) is None:
        raise typer.BadParameter(f"{plot} : the figure's format is its suffix, one of "
                                 f"{', '.join(FORMATS)}", param_hint="--plot")
    found = lineage_rows(paths, select, state_dir, None if metric is None else {metric})
    if not found:
        raise OuroError("ouro compare: no lineage is chosen (check the specs and -l)")
    chosen = _metric(metric, found, "ouro compare")
    generation = _generation(at, found)
    members = members_of(found, chosen, by)
    orphans = [item.name for item in found if item.member is not None and item.member.orphaned]
    comparison = compare_at(members, generation, carry_last=carry_last)
    if plot is not None:
        lasts = [item.last for item in found if item.last is not None]
        _plot(plot, members, chosen, max(lasts) if lasts else 0, carry_last)
    shown = str(plot) if plot is not None else None
    sys.stdout.write(compare_json(comparison, members, chosen, at, orphans, shown) if as_json
                     else compare_text(comparison, chosen, orphans, shown))


def best_command(
    paths: SpecPaths,
    by: Annotated[str, typer.Option("--by", help="the metric: a per-generation column of "
                                    "`ouro export` (probe.NAME.METRIC, organism_bytes, ...)")],
    count: Annotated[int, typer.Option("-n", min=1, help="how many pairs")] = 5,
    lowest: Annotated[bool, typer.Option("--lowest", help="the lowest values, not the "
                                         "highest")] = False,
    select: Select = None,
    as_json: Json = False,
    state_dir: StateDir = None,
) -> None:
    """The K (lineage, generation) pairs with the highest (or lowest) value of a metric,
    each with the `ouro cat` command that prints its organism."""
    from reconciler.engine.compare_rows import lineage_rows
    from reconciler.report.compare import best_json, best_text, check_metric, ranked

    found = lineage_rows(paths, select, state_dir, {by}, command="ouro best")
    check_metric(by, found, "ouro best", "--by")
    specs = {item.name: str(item.spec_file) for item in found if item.spec_file is not None}
    top = ranked(found, by, count, lowest, specs)
    sys.stdout.write(best_json(top, by, lowest) if as_json else best_text(top, by, lowest))


def cat_command(
    name: Annotated[str, typer.Argument(help="lineage name")],
    generation: Annotated[int, typer.Argument(help="generation number (0 is the seed)",
                                              min=0)],
    path: Annotated[str, typer.Argument(help="a file of the generation's tree")]
    = "organism.el",
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write to FILE")] = None,
    specs: SpecsOption = None,
    state_dir: StateDir = None,
) -> None:
    """One file of a generation's tree, byte for byte (default organism.el)."""
    from reconciler.engine.fleet import Fleet
    from reconciler.state.seed_row import seed_row
    from reconciler.state.tree_file import file_at

    ((paths, summary),) = Fleet(state_dir, command="ouro cat").summaries([name], specs or [])
    row = seed_row(paths, summary) if generation == 0 else summary.row(generation)
    if row is None:
        raise OuroError(f"ouro cat: {name} has no generation {generation} (it has "
                        f"{summary.generations}; 0 is its seed); see `ouro log {name}`")
    data = file_at(paths, row.lineage_commit, path, f"ouro cat: {name} gen {generation}")
    if out is not None:
        _write(out, data, "the file", "ouro cat")
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def register(app: typer.Typer) -> None:
    app.command("compare", short_help="Compare a metric across set cells, with CIs and "
                "p-values.")(compare_command)
    app.command("best", short_help="The best (lineage, generation) pairs by a metric.")(
        best_command)
    app.command("cat", short_help="One file of a generation's tree, byte for byte.")(
        cat_command)
