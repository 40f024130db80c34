"""CLI: what grew. `ouro log`, `ouro show`, `ouro diff`, `ouro export`.

Thin by rule: ask the fleet (``reconciler.engine.fleet``) for the named lineages'
per-generation table (``Fleet.table``: ``reconciler.state.table``, from the cached,
incremental summaries) or one generation, render it, exit 0. A name that is not there
is an error naming the remedy.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reconciler.cli.options import Json, Select, StateDir, one_of
from reconciler.errors import OuroError

if TYPE_CHECKING:
    from reconciler.kernel.base.config import LineagePaths
    from reconciler.state.summaries import LineageSummary
    from reconciler.state.table import GenerationTable

DEFAULT_EXPERIMENT = "ouro"  # `ouro export --to mlflow`'s experiment unless --experiment
NamesArgument = Annotated[list[str] | None, typer.Argument(
    help="lineage names; with --specs, a LineageSet's name: its members and orphans; "
    "none: every lineage of --specs, else of the state dir", show_default=False)]
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


LOG_FORMATS = ("text", "json", "jsonl", "csv")


def _export_format(value: str) -> str:
    """--format of export: one of ``reconciler.report.table.EXPORT_FORMATS`` (a usage
    error otherwise)."""
    from reconciler.report.table import EXPORT_FORMATS

    return one_of(EXPORT_FORMATS)(value)


def _columns(value: str | None) -> list[str] | None:
    if value is None:
        return None
    found = [name.strip() for name in value.split(",") if name.strip()]
    if not found:
        raise typer.BadParameter("names no column", param_hint="--columns")
    return found


def log_command(
    names: NamesArgument = None,
    as_json: Json = False,
    fmt: Annotated[str, typer.Option("--format", callback=one_of(LOG_FORMATS),
                                     help="text (default), json (as --json), or the "
                                     "export's jsonl or csv of the rows shown")] = "text",
    columns: Annotated[str | None, typer.Option(
        "--columns", help="the table's columns, comma-separated: any column of `ouro export` "
        "(docs/export.md) or diff (default: what fits 120 characters)")] = None,
    deaths: Annotated[bool, typer.Option("--deaths", help="only generations that died")]
    = False,
    since: Annotated[int | None, typer.Option("--since", min=1,
                                              help="only generations N and later")] = None,
    specs: SpecsOption = None,
    select: Select = None,
    state_dir: StateDir = None,
) -> None:
    """One row per generation: outcome, organism size and diff, model calls, spend, CPU,
    peak memory, wall time, probe metrics (--columns chooses; --json has every column)."""
    from reconciler.engine.fleet import Fleet
    from reconciler.report.log import check_columns, log_json, log_text
    from reconciler.report.table import export_text

    chosen = _columns(columns)
    if as_json and fmt not in ("text", "json"):
        raise typer.BadParameter(f"--json is --format json, not {fmt}", param_hint="--json")
    whole, stops = Fleet(state_dir).table_and_stops(names or [], specs or [], select)
    table = whole.only(lambda row: (not deaths or row.facts.status == "died")
                       and (since is None or row.generation >= since))
    if chosen is not None:
        check_columns(table, chosen)
    if as_json or fmt == "json":
        sys.stdout.write(log_json(table, stops))
    elif fmt in ("jsonl", "csv"):
        sys.stdout.write(export_text(table, fmt))
    else:
        sys.stdout.write(log_text(table, stops, chosen))


def _one(name: str, specs: list[Path] | None, state_dir: Path | None) -> tuple[
    LineagePaths, LineageSummary
]:
    return _summaries([name], specs, state_dir)[0]


def show_command(
    name: Annotated[str, typer.Argument(help="lineage name")],
    generation: Annotated[int, typer.Argument(help="generation number (0 is the seed)",
                                              min=0)],
    full: Annotated[bool, typer.Option(
        "--full", help="prompts, replies, bodies and the diff in full")]
    = False,
    as_json: Json = False,
    specs: SpecsOption = None,
    state_dir: StateDir = None,
) -> None:
    """One generation: journal entry, diff against the previous generation (its first 2,000
    lines and 256 KiB without --full), stderr and the body that died, the model's prompts
    and replies, ceilings and accounting."""
    from reconciler.report.history import show_json, show_text
    from reconciler.state.history import SHOW_LIMITS, detail
    from reconciler.state.probes import latest
    from reconciler.state.ran_with import born_under
    from reconciler.state.seed_row import seed_detail

    paths, summary = _one(name, specs, state_dir)
    found = (seed_detail(paths, summary) if generation == 0
             else detail(paths, summary, generation, None if full else SHOW_LIMITS))
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


def _to_mlflow(names: list[str], specs: list[Path] | None, tracking_uri: str | None,
               experiment: str, state_dir: Path | None, select: list[str] | None) -> None:
    from reconciler.engine.fleet import Fleet
    from reconciler.engine.mlflow_export import export_to_mlflow
    from reconciler.report.escape import terminal

    table, done_runs = export_to_mlflow(Fleet(state_dir), names, specs or [], tracking_uri,
                                        experiment, select)
    _problems(table)
    for done in done_runs:
        steps = (f"generations {done.steps_added[0]}-{done.steps_added[-1]}"
                 if done.steps_added else "nothing new")
        nested = f", under run {done.parent_run_id}" if done.parent_run_id else ""
        print(terminal(f"{done.name}: MLflow run {done.run_id} ("
                       f"{'created' if done.created else 'found'} in experiment "
                       f"{experiment!r}{nested}): {done.points_added} metric points added, "
                       f"{steps}"))
        for key in done.params_kept:
            print(terminal(f"{done.name}: param {key} differs from the run's; MLflow never "
                           "changes a logged param (the run keeps the old value; tag "
                           "ouro.spec_digest is current)"), file=sys.stderr)


def _problems(table: GenerationTable) -> None:
    from reconciler.report.escape import terminal

    for lineage in table.lineages:
        for problem in lineage.summary.problems:
            print(terminal(f"ouro export: {lineage.name}: {problem}"), file=sys.stderr)


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
    names: NamesArgument = None,
    fmt: Annotated[str, typer.Option("--format", callback=_export_format,
                                     help="csv, jsonl or json (one array)")] = "csv",
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write to FILE")] = None,
    to: Annotated[str | None, typer.Option(
        "--to", help="mlflow: log to an MLflow tracking store instead (the mlflow extra)")]
    = None,
    tracking_uri: Annotated[str | None, typer.Option(
        "--tracking-uri", help="with --to mlflow: the tracking URI: a folder, sqlite:///FILE, "
        "http://... (else MLflow's default, MLFLOW_TRACKING_URI)")] = None,
    experiment: Annotated[str, typer.Option(
        "--experiment", help="with --to mlflow: the experiment (made when missing)")]
    = DEFAULT_EXPERIMENT,
    specs: SpecsOption = None,
    select: Select = None,
    state_dir: StateDir = None,
) -> None:
    """The per-generation table for pandas or R: one row per generation (docs/export.md);
    or, with --to mlflow, one MLflow run per lineage with a step per generation, nested
    under its set's run."""
    from reconciler.engine.fleet import Fleet
    from reconciler.report.table import export_text

    _check_destination(to, out, tracking_uri, experiment)
    if to is not None:
        _to_mlflow(names or [], specs, tracking_uri, experiment, state_dir, select)
        return
    table = Fleet(state_dir).table(names or [], specs or [], select)
    _problems(table)
    text = export_text(table, fmt)
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
