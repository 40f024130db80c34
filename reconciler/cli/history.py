"""CLI: what grew. `ouro log`, `ouro show`, `ouro diff`, `ouro export`.

Thin by rule: find the named lineages, summarize them (cached, incremental),
render, exit 0. A name that is not there is an error naming the remedy.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reconciler.cli.options import Json, StateDir, one_of
from reconciler.errors import OuroError

if TYPE_CHECKING:
    from reconciler.kernel.base.config import LineagePaths
    from reconciler.state.summaries import LineageSummary

NamesArgument = Annotated[list[str], typer.Argument(help="lineage names", show_default=False)]
SpecsOption = Annotated[
    list[Path] | None,
    typer.Option("--specs", help="spec files or folders naming the lineages (else the state "
                 "dir's lineages, by name)"),
]


def _summaries(names: list[str], specs: list[Path] | None, state_dir: Path | None) -> list[
    tuple[LineagePaths, LineageSummary]
]:
    from reconciler.state.fleet import find_lineages, summary_cache_dir
    from reconciler.state.summaries import summarize

    cache = summary_cache_dir(state_dir)
    return [(found.paths, summarize(found.paths, cache))
            for found in find_lineages(names, specs or [], state_dir)]


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
    from reconciler.report.history import log_json, log_text
    from reconciler.state.probes import columns

    chosen = []
    probes = {}
    for paths, summary in _summaries(names, specs, state_dir):
        rows = [row for row in summary.rows
                if (not deaths or row.status == "died")
                and (since is None or row.generation >= since)]
        chosen.append((summary, rows))
        probes[summary.name] = columns(paths)
    sys.stdout.write(log_json(chosen, probes) if as_json else log_text(chosen, probes))


def _one(name: str, specs: list[Path] | None, state_dir: Path | None) -> tuple[
    LineagePaths, LineageSummary
]:
    return _summaries([name], specs, state_dir)[0]


def show_command(
    name: Annotated[str, typer.Argument(help="lineage name")],
    generation: Annotated[int, typer.Argument(help="generation number", min=1)],
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

    paths, summary = _one(name, specs, state_dir)
    found = detail(paths, summary, generation)
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


def export_command(
    names: NamesArgument,
    fmt: Annotated[str, typer.Option("--format", callback=one_of(("csv", "jsonl")),
                                     help="csv or jsonl")] = "csv",
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write to FILE")] = None,
    specs: SpecsOption = None,
    state_dir: StateDir = None,
) -> None:
    """The per-generation table for pandas or R: one row per generation (docs/export.md)."""
    from reconciler.report.escape import terminal
    from reconciler.report.history import EXPORT_FORMATS, export_text

    if fmt not in EXPORT_FORMATS:
        raise OuroError(f"ouro export: --format {fmt!r} is not one of "
                        f"{', '.join(EXPORT_FORMATS)}")
    from reconciler.state.probes import columns

    summaries = []
    probes = {}
    for paths, summary in _summaries(names, specs, state_dir):
        summaries.append(summary)
        probes[summary.name] = columns(paths)
    for summary in summaries:
        for problem in summary.problems:
            print(terminal(f"ouro export: {summary.name}: {problem}"), file=sys.stderr)
    text = export_text(summaries, fmt, probes)
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
