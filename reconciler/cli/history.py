"""CLI: what grew. `ouro log`, `ouro show`, `ouro diff`, `ouro export`.

Thin by rule: ask the fleet (``reconciler.engine.fleet``) for the named lineages'
summaries (cached, incremental), render, exit 0. A name that is not there is an error
naming the remedy.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reconciler.cli.options import Json, StateDir, one_of
from reconciler.errors import OuroError

if TYPE_CHECKING:
    from reconciler.engine.sets import Shown
    from reconciler.kernel.base.config import LineagePaths
    from reconciler.report.history import ProbeColumns
    from reconciler.state.summaries import LineageSummary

DEFAULT_EXPERIMENT = "ouro"  # `ouro export --to mlflow`'s experiment unless --experiment
NamesArgument = Annotated[list[str], typer.Argument(
    help="lineage names; with --specs, a LineageSet's name: its members and orphans",
    show_default=False)]
SpecsOption = Annotated[
    list[Path] | None,
    typer.Option("--specs", help="spec files or folders naming the lineages (else the state "
                 "dir's lineages, by name)"),
]


def _summaries(names: list[str], specs: list[Path] | None, state_dir: Path | None) -> list[
    tuple[LineagePaths, LineageSummary]
]:
    from reconciler.engine.fleet import Fleet

    return Fleet(state_dir).summaries(names, specs or [])


def _named(names: list[str], specs: list[Path] | None, state_dir: Path | None) -> list[
    tuple[Shown, LineageSummary]
]:
    """Each name's lineage, or a set's members and orphans, cell by cell (a set's name
    with --specs), each with its summary."""
    from reconciler.engine.fleet import Fleet

    return Fleet(state_dir).named_summaries(names, specs or [])


def log_command(
    names: NamesArgument,
    as_json: Json = False,
    deaths: Annotated[bool, typer.Option("--deaths", help="only generations that died")]
    = False,
    since: Annotated[int | None, typer.Option("--since", min=1,
                                              help="only generations N and later")] = None,
    specs: SpecsOption = None,
    state_dir: StateDir = None,
) -> None:
    """One row per generation: outcome, organism size and diff, model calls, tokens, spend,
    CPU, peak memory, wall time, start."""
    from functools import partial

    from reconciler.plan.planner import shown_until
    from reconciler.report.history import log_json, log_text
    from reconciler.state.probes import columns, metrics
    from reconciler.state.seed_row import with_seed

    chosen = []
    probes = {}
    members = {}
    stops = {}
    for found, summary in _named(names, specs, state_dir):
        every = summary.rows if deaths or since is not None else with_seed(found.paths, summary)
        rows = [row for row in every  # row 0 (the seed) unless --deaths or --since
                if (not deaths or row.status == "died")
                and (since is None or row.generation >= since)]
        chosen.append((summary, rows))
        probes[summary.name] = columns(found.paths)
        members[summary.name] = found.member
        # spec.until's stop, as status shows it (with --specs only: it needs the spec)
        stops[summary.name] = None if found.spec is None else shown_until(
            found.spec, partial(metrics, found.paths), summary.generations)
    render = log_json if as_json else log_text
    sys.stdout.write(render(chosen, probes, members, stops))


def _one(name: str, specs: list[Path] | None, state_dir: Path | None) -> tuple[
    LineagePaths, LineageSummary
]:
    return _summaries([name], specs, state_dir)[0]


def show_command(
    name: Annotated[str, typer.Argument(help="lineage name")],
    generation: Annotated[int, typer.Argument(help="generation number (0 is the seed)",
                                              min=0)],
    full: Annotated[bool, typer.Option("--full", help="prompts, replies and bodies in full")]
    = False,
    as_json: Json = False,
    specs: SpecsOption = None,
    state_dir: StateDir = None,
) -> None:
    """One generation: journal entry, diff against the previous generation, stderr and the
    body that died, the model's prompts and replies, ceilings and accounting."""
    from reconciler.report.history import show_json, show_text
    from reconciler.state.history import detail
    from reconciler.state.probes import latest
    from reconciler.state.ran_with import born_under
    from reconciler.state.seed_row import seed_detail

    paths, summary = _one(name, specs, state_dir)
    found = (seed_detail(paths, summary) if generation == 0
             else detail(paths, summary, generation))
    render = show_json if as_json else show_text
    probes = [item.record for item in latest(paths).get(generation, [])]
    sys.stdout.write(render(name, found, full=full, born=born_under(paths), probes=probes))


def diff_command(
    name: Annotated[str, typer.Argument(help="lineage name")],
    first: Annotated[int, typer.Argument(help="generation A (0 is the seed)", min=0)],
    second: Annotated[int, typer.Argument(help="generation B", min=0)],
    specs: SpecsOption = None,
    state_dir: StateDir = None,
) -> None:
    """The diff between two generations' trees (A -> B)."""
    from reconciler.report.history import diff_text
    from reconciler.state.history import diff_generations

    paths, summary = _one(name, specs, state_dir)
    sys.stdout.write(diff_text(diff_generations(paths, summary, first, second)))


def _require_mlflow() -> None:
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:
        raise OuroError(
            "ouro export --to mlflow: needs the MLflow client, which is not installed; "
            "install it from a checkout with: pip install -c constraints.txt -e '.[mlflow]' "
            "(or pip install 'ouro-lineages[mlflow]')")


def _to_mlflow(found: list[tuple[LineagePaths, LineageSummary]], probes: ProbeColumns,
               specs: list[Path] | None, tracking_uri: str | None, experiment: str,
               state_dir: Path | None) -> None:
    import json

    from reconciler.engine.fleet import Fleet
    from reconciler.engine.mlflow_export import export_runs, lineage_run
    from reconciler.report.escape import terminal
    from reconciler.report.history import export_text
    from reconciler.state.birth import birth

    loaded = {item.name: item for item in Fleet(state_dir).load(specs)} if specs else {}
    runs = []
    for paths, summary in found:
        rows = [json.loads(line) for line in export_text([summary], "jsonl", probes)
                .splitlines()]
        runs.append(lineage_run(summary.name, rows, birth(paths), loaded.get(summary.name)))
    for done in export_runs(runs, tracking_uri, experiment):
        steps = (f"generations {done.steps_added[0]}-{done.steps_added[-1]}"
                 if done.steps_added else "nothing new")
        print(terminal(f"{done.name}: MLflow run {done.run_id} ("
                       f"{'created' if done.created else 'found'} in experiment "
                       f"{experiment!r}): {done.points_added} metric points added, {steps}"))
        for key in done.params_kept:
            print(terminal(f"{done.name}: param {key} differs from the run's; MLflow never "
                           "changes a logged param (the run keeps the old value; tag "
                           "ouro.spec_digest is current)"), file=sys.stderr)


def _check_destination(to: str | None, out: Path | None, tracking_uri: str | None,
                       experiment: str) -> None:
    """Usage errors (exit 2) of --to and its options; a missing extra (exit 1)."""
    if to not in (None, "mlflow"):
        raise typer.BadParameter(f"{to!r} is not one of mlflow", param_hint="--to")
    if to is None and (tracking_uri is not None or experiment != DEFAULT_EXPERIMENT):
        raise typer.BadParameter("goes with --to mlflow", param_hint="--tracking-uri/--experiment")
    if to is not None and out is not None:
        raise typer.BadParameter("-o writes the table to a file; --to mlflow writes none",
                                 param_hint="-o")
    if to is not None:
        _require_mlflow()


def export_command(
    names: NamesArgument,
    fmt: Annotated[str, typer.Option("--format", callback=one_of(("csv", "jsonl")),
                                     help="csv or jsonl")] = "csv",
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write to FILE")] = None,
    to: Annotated[str | None, typer.Option(
        "--to", help="mlflow: log to an MLflow tracking store instead (the mlflow extra)")]
    = None,
    tracking_uri: Annotated[str | None, typer.Option(
        "--tracking-uri", help="with --to mlflow: the tracking URI (else MLflow's default, "
        "MLFLOW_TRACKING_URI)")] = None,
    experiment: Annotated[str, typer.Option(
        "--experiment", help="with --to mlflow: the experiment (made when missing)")]
    = DEFAULT_EXPERIMENT,
    specs: SpecsOption = None,
    state_dir: StateDir = None,
) -> None:
    """The per-generation table for pandas or R: one row per generation (docs/export.md);
    or, with --to mlflow, one MLflow run per lineage with a step per generation."""
    from reconciler.report.escape import terminal
    from reconciler.report.history import EXPORT_FORMATS, export_text
    from reconciler.state.probes import columns
    from reconciler.state.seed_row import with_seed

    if fmt not in EXPORT_FORMATS:
        raise OuroError(f"ouro export: --format {fmt!r} is not one of "
                        f"{', '.join(EXPORT_FORMATS)}")
    _check_destination(to, out, tracking_uri, experiment)
    named = _named(names, specs, state_dir)
    found = [(shown.paths, summary) for shown, summary in named]
    summaries = [summary for _paths, summary in found]
    probes = {summary.name: columns(paths) for paths, summary in found}
    members = {summary.name: shown.member for shown, summary in named}
    for summary in summaries:
        for problem in summary.problems:
            print(terminal(f"ouro export: {summary.name}: {problem}"), file=sys.stderr)
    if to is not None:
        _to_mlflow(found, probes, specs, tracking_uri, experiment, state_dir)
        return
    rows = {summary.name: with_seed(paths, summary) for paths, summary in found}  # row 0 first
    text = export_text(summaries, fmt, probes, members, rows)
    if out is None:
        sys.stdout.write(text)
        return
    from reconciler.errors import host_fault
    from reconciler.ownfiles import write_atomic

    try:
        write_atomic(out, text.encode("utf-8"), what="the export file", follow=True,
                     mode=0o666)
    except OSError as error:
        raise host_fault(error, f"writing {out}") or OuroError(
            f"ouro export: cannot write {out}: {error.strerror}") from error


def register(app: typer.Typer) -> None:
    app.command("log", short_help='One row per generation of a lineage.')(log_command)
    app.command("show",
                short_help='One generation in full: journal, diff, model calls.')(show_command)
    app.command("diff", short_help="The diff between two generations' trees.")(diff_command)
    app.command("export", short_help='The per-generation table, for pandas or R.')(export_command)
