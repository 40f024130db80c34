"""CLI: `ouro apply`: reconcile specs until the lineages match.

Parse the options into an ``ApplyRequest``, call ``engine.session.apply`` (the
whole flow: see its docstring), render its outcome, exit with its code. A new
option is a field of ``ApplyRequest`` and one line in ``_request``.

Streams: what apply produces (the plan, the summary of every lineage, or the JSON
report) goes to stdout; progress, notes and the question go to stderr. With ``--json``
a refusal before any lineage ran is a JSON document too (its ``error``), and its
message goes to stderr as always.
"""

from __future__ import annotations

import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reconciler.cli.options import Json, MaxSetMembers, Select, StateDir, one_of
from reconciler.errors import ApplyError, OuroError

if TYPE_CHECKING:  # the engine is imported inside the command: start-up stays light
    from reconciler.engine.session import ApplyOutcome, ApplyRequest
    from reconciler.plan import Plan
    from reconciler.report.progress import PlainReporter


def _money(text: str | None) -> Decimal | None:
    if text is None:
        return None
    try:
        value = Decimal(text.strip().lstrip("$"))
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value < 0:
        # a bad value is a usage error: exit 2 with the usage line
        raise typer.BadParameter(f"{text!r} is not an amount of USD (e.g. 2.50)",
                                 param_hint="--max-spend")
    return value


def _duration(text: str | None) -> float | None:
    if text is None:
        return None
    from reconciler.spec.units import parse_duration

    try:
        return float(parse_duration(text))
    except (ValueError, TypeError) as error:
        raise typer.BadParameter(f"{text!r}: {error} (e.g. 90s, 10m, 2h)",
                                 param_hint="--deadline") from error


ExecutorOption = Annotated[str, typer.Option(
    "--executor", callback=one_of(("local", "slurm")),
    help="local (this host) or slurm (a job per lineage; docs/slurm.md)")]


def _only_local_limits(executor: str, deadline: str | None,
                       max_generations: int | None) -> None:
    """--deadline and --max-generations with another executor are a usage error (exit 2)."""
    if executor != "local" and (deadline is not None or max_generations is not None):
        raise typer.BadParameter(
            "--deadline and --max-generations count this host's generations; with "
            f"--executor {executor} each job stops at its own time limit instead "
            "(spec.executor.slurm.time): leave them out", param_hint="--executor")


class _Terminal:
    """The plan on stderr (not with --json), and the question before anything runs."""

    def __init__(self, *, yes: bool, quiet: bool) -> None:
        self.yes, self.quiet = yes, quiet

    def show_plan(self, plan: Plan) -> None:
        if not self.quiet:
            from reconciler.report.render import print_plan

            print_plan(plan, sys.stdout)
            sys.stdout.flush()  # shown before the question and the run, even into a pipe

    def confirm(self, worst_usd: Decimal) -> bool:
        if self.yes:
            return True
        if not sys.stdin.isatty():
            raise ApplyError(
                "ouro apply: no terminal to confirm on: pass --yes to apply without confirmation"
            )
        return typer.confirm(f"Apply? (worst-case spend ${worst_usd})", default=False, err=True)


def apply_command(
    paths: Annotated[
        list[Path],
        typer.Argument(help="spec files or folders, or one plan file saved by `ouro plan -o`"),
    ],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    parallel: Annotated[
        int | None,
        typer.Option(
            "--parallel", min=1, help="lineages at once (default: what cores and quotas allow)"
        ),
    ] = None,
    max_spend: Annotated[
        str | None,
        typer.Option(
            "--max-spend", help="refuse the whole apply if its worst-case spend is above this (USD)"
        ),
    ] = None,
    select: Select = None,
    deadline: Annotated[
        str | None,
        typer.Option("--deadline", help="start no generation after this long (e.g. 30m)"),
    ] = None,
    max_generations: Annotated[
        int | None,
        typer.Option("--max-generations", min=0, help="run at most this many generations in all"),
    ] = None,
    lock_timeout: Annotated[
        float,
        typer.Option(
            "--lock-timeout", min=0, help="seconds to wait for a lineage held by another apply"
        ),
    ] = 60.0,
    no_provider_check: Annotated[
        bool,
        typer.Option(
            "--no-provider-check",
            help="skip the provider check: the free authenticated request to each provider "
            "before its first generation (for a server that dislikes it)",
        ),
    ] = False,
    no_probe: Annotated[  # the old name of --no-provider-check (spec probes are not it)
        bool, typer.Option("--no-probe", hidden=True)] = False,
    as_json: Json = False,
    state_dir: StateDir = None,
    executor: ExecutorOption = "local",
    max_set_members: MaxSetMembers = None,
) -> None:
    """Reconcile: run the missing generations until every lineage matches its spec."""
    from reconciler.engine.session import ApplyRequest
    from reconciler.report.apply import apply_json, apply_summary
    from reconciler.report.progress import LiveReporter, PlainReporter, SilentReporter

    _only_local_limits(executor, deadline, max_generations)
    request = ApplyRequest(
        paths=tuple(paths),
        state_dir=state_dir,
        select=tuple(select or ()),
        parallel=parallel,
        max_spend=_money(max_spend),
        deadline_seconds=_duration(deadline),
        max_generations=max_generations,
        lock_timeout=lock_timeout,
        executor=executor,
        probe=not (no_provider_check or no_probe),
    )
    if as_json:
        reporter: PlainReporter = SilentReporter()
    elif sys.stderr.isatty():
        reporter = LiveReporter()
    else:
        reporter = PlainReporter()
    outcome = _epochs(request, _applied(request, _Terminal(yes=yes, quiet=as_json), reporter,
                                        as_json=as_json), reporter, as_json=as_json)
    if as_json:
        sys.stdout.write(apply_json(outcome))
    else:
        sys.stdout.write(apply_summary(outcome))
    raise SystemExit(outcome.exit_code)


def _applied(request: ApplyRequest, ui: _Terminal, reporter: PlainReporter, *,
             as_json: bool) -> ApplyOutcome:
    """apply's outcome; with ``--json`` a refusal is a document on stdout too (its message
    still goes to stderr, as every error does)."""
    from reconciler.engine.session import apply
    from reconciler.report.apply import refusal_json

    try:
        return apply(request, ui, reporter)
    except OuroError as error:
        if as_json:
            sys.stdout.write(refusal_json(str(error)))
        raise


def _epochs(request: ApplyRequest, outcome: ApplyOutcome, reporter: PlainReporter, *,
            as_json: bool) -> ApplyOutcome:
    """A selected set's next epochs, each applied after its decision is recorded (no
    second question), the outcomes summed into one."""
    while outcome.exit_code == 0 and outcome.selected and _selected(request):
        outcome = outcome.then(_applied(request, _Terminal(yes=True, quiet=as_json), reporter,
                                        as_json=as_json))
    return outcome


def _selected(request: ApplyRequest) -> bool:
    """Record each selected set's decision at the end of its epoch (docs/selection.md);
    True when one was recorded: apply again to run the new epoch."""
    from reconciler.engine.fleet import Fleet
    from reconciler.engine.selection import advance

    paths = request.paths
    if len(paths) == 1 and paths[0].is_file() and paths[0].suffix == ".json":
        return False  # a saved plan applies that plan, no further epoch
    if request.max_generations is not None or request.deadline_seconds is not None:
        return False  # the limits are the command's: the next apply decides
    return advance(Fleet(request.state_dir, command="ouro apply"), request.paths,
                   request.select)


def register(app: typer.Typer) -> None:
    app.command("apply",
                short_help='Run the missing generations until the specs are met.')(apply_command)
