"""One `ouro apply`, from request to outcome: the orchestration the CLI only calls.

The flow is fixed and visible: load, observe, plan, show, refuse the whole apply
if it cannot be afforded, confirm, run, audit, report. Ctrl-C once: running
generations finish, no new ones start; twice: running generations end now,
publishing nothing. Either way the repositories are left consistent.

The CLI parses its options into an ``ApplyRequest`` (one field per option) and
calls ``apply``; what the person sees and answers goes through the ``ApplyUI``
it passes (this layer renders nothing), and the returned ``ApplyOutcome``
carries everything the report shows and the exit code.
"""

from __future__ import annotations

import resource
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from reconciler.engine import kernel_store_writer
from reconciler.engine.apply import (
    Engine,
    Limits,
    LineageResult,
    Reporter,
    check_spend,
    default_parallelism,
)
from reconciler.engine.audits import AuditBatches
from reconciler.engine.events import EVENTS_FILE, EventLog
from reconciler.engine.executors import check_options, make_executor
from reconciler.engine.fleet import Fleet
from reconciler.engine.provider_check import Prober
from reconciler.errors import ApplyError, PlanFileError
from reconciler.ownfiles import private_folder
from reconciler.plan import LineagePlan, Plan
from reconciler.spec.load import LoadedSpec
from reconciler.state.fleet import audit_record_dir

if TYPE_CHECKING:  # a saved plan's module only when apply is given one
    from reconciler.plan.saved import SavedPlan

EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class ApplyRequest:
    """What `ouro apply` was asked, parsed: one field per option (add new ones here)."""

    paths: tuple[Path, ...]  # spec files or folders, or one saved plan (*.json)
    state_dir: Path | None = None
    select: tuple[str, ...] = ()  # names or label selectors (spec.select); empty: all
    parallel: int | None = None  # lineages at once; None: what cores and quotas allow
    max_spend: Decimal | None = None  # refuse the whole apply above this worst case
    deadline_seconds: float | None = None  # start no generation after this long
    max_generations: int | None = None  # in all
    lock_timeout: float = 60.0  # seconds to wait for a lineage another apply holds
    executor: str = "local"  # where the lineages run: local | slurm (engine.executors)
    probe: bool = True  # a free authenticated request per provider before its first generation


class ApplyUI(Protocol):
    """What the person sees and answers before anything runs (the CLI's side)."""

    def show_plan(self, plan: Plan) -> None: ...

    def confirm(self, worst_usd: Decimal) -> bool:
        """May the plan run? Asked only when it would run something."""
        ...


class ClosingReporter(Reporter, Protocol):
    def close(self) -> None: ...


@dataclass(frozen=True)
class ApplyOutcome:
    """What one apply did, lineage by lineage (in spec order), and how it stopped."""

    lineages: list[LineageResult]
    interrupted: bool
    stopped_by: str | None  # "interrupt", "deadline", "max-generations" or None
    event_log_failed: str | None  # why the event log could not be written, if it could not
    selected: bool = False  # a set of this apply has spec.selection (docs/selection.md)

    @property
    def failed(self) -> list[LineageResult]:
        return [r for r in self.lineages
                if r.errors or r.refusal or r.final_action == "refuse"]

    @property
    def unfinished(self) -> list[LineageResult]:
        return [r for r in self.lineages if r.final_action in ("create", "extend", "recover")]

    @property
    def exit_code(self) -> int:
        """130 interrupted; 1 a failure, or unfinished work no limit asked for; else 0."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.failed:
            return 1
        if self.unfinished and self.stopped_by not in ("deadline", "max-generations"):
            return 1
        return 0

    def then(self, later: ApplyOutcome) -> ApplyOutcome:
        """This round's outcome followed by ``later``'s (a selected set's next epoch, in the
        same `ouro apply`): each lineage's generations, outcomes, spend, measurements and
        errors summed; its planned action the first round's, where it ended the last's; a
        lineage new in the later round (a member born into its epoch) added in its place."""
        earlier = {result.name: result for result in self.lineages}
        joined = [_joined(earlier.pop(result.name), result) if result.name in earlier
                  else result for result in later.lineages]
        return replace(later, lineages=[*earlier.values(), *joined],
                       event_log_failed=later.event_log_failed or self.event_log_failed)


def _joined(first: LineageResult, then: LineageResult) -> LineageResult:
    """One lineage's results over two rounds of one apply."""
    return replace(
        then, planned_action=first.planned_action,
        generations_run=first.generations_run + then.generations_run,
        outcomes=first.outcomes + then.outcomes, spend_usd=first.spend_usd + then.spend_usd,
        errors=[*first.errors, *then.errors], recovered=then.recovered or first.recovered,
        model_failures=first.model_failures + then.model_failures,
        last_model_failure=then.last_model_failure or first.last_model_failure,
        audit=then.audit or first.audit, measured=first.measured + then.measured,
        probe_failures=first.probe_failures + then.probe_failures)


@dataclass(frozen=True)
class _Prepared:
    specs: list[LoadedSpec]
    plan: Plan
    from_saved_plan: bool = False  # a fresh saved plan was the review: no second question

    def jobs(self) -> tuple[list[tuple[LoadedSpec, LineagePlan]], list[tuple[LoadedSpec,
                                                                             LineagePlan]]]:
        """(runnable, to re-check): a refusal seen without the lock may be another apply's
        work in progress (a lineage half created, an observation ahead of its commit): it
        is confirmed under the lock."""
        pairs = list(zip(self.specs, self.plan.lineages, strict=True))
        return ([(s, i) for s, i in pairs if i.pending or i.measure.measurements],
                [(s, i) for s, i in pairs if i.action == "refuse"])


def _load_for_plan_file(plan_path: Path, fleet: Fleet) -> tuple[SavedPlan, list[LoadedSpec]]:
    from reconciler.plan.saved import load_plan

    saved = load_plan(plan_path)
    files = sorted({item.spec_file for item in saved.lineages if item.spec_file})
    missing = [item.name for item in saved.lineages if not item.spec_file]
    if missing:
        raise PlanFileError(
            f"ouro apply: {plan_path}: the plan does not say where the specs of "
            f"{', '.join(missing)} are: make it again with `ouro plan PATH -o FILE`"
        )
    specs = fleet.load([Path(f) for f in files])
    wanted = {item.name for item in saved.lineages}
    return saved, [spec for spec in specs if spec.name in wanted]


def prepare(request: ApplyRequest, fleet: Fleet) -> _Prepared:
    """Load, observe once, plan; a saved plan must still be fresh. Runs nothing."""
    state = fleet.state_dir
    try:
        private_folder(state, "the state dir")  # 0700 if new; refused if others can write it
    except OSError as error:
        raise ApplyError(f"ouro apply: cannot create the state dir {state} "
                         f"({error.strerror}): check its parent's permissions, or name "
                         "another with --state-dir") from error
    paths = list(request.paths)
    saved = None
    if len(paths) == 1 and paths[0].is_file() and paths[0].suffix == ".json":
        saved, specs = _load_for_plan_file(paths[0], fleet)
    else:
        specs = fleet.load(paths)
    specs = fleet.select(specs, request.select)
    observed = fleet.observe_all(specs)
    plan = fleet.plan(specs, observed=observed)
    if saved is not None:
        from reconciler.plan.saved import check_fresh

        stale = check_fresh(
            saved, observed, instrument=fleet.identity,
            spec_digests={s.name: s.sha256 for s in specs})
        if stale:
            raise PlanFileError(
                f"ouro apply: the saved plan {paths[0]} is stale; nothing was run:\n  "
                + "\n  ".join(stale)
                + "\nmake a new plan with `ouro plan ... -o FILE`"
            )
    return _Prepared(specs, plan, from_saved_plan=saved is not None)


def raise_open_files_limit() -> None:
    """Lift this process's soft RLIMIT_NOFILE to its hard limit: a running generation holds
    about a dozen descriptors (pipes to its broker and its life, the scope's files, the
    repositories), so a fleet of hundreds passes the usual soft limit of 1,024. Every life
    gets its own limit from the kernel's ceilings, whatever this process's is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextmanager
def _interrupts(limits: Limits, say: Reporter) -> Iterator[None]:
    """First SIGINT/SIGTERM: stop starting generations; second: cancel running ones."""

    def handler(signum: int, frame: FrameType | None) -> None:
        del frame
        if not limits.stop.is_set():
            limits.stop.set()
            say.note(
                f"ouro: {signal.Signals(signum).name}: finishing running generations, starting "
                "no new ones (again to stop them now, publishing nothing)"
            )
        else:
            limits.cancel.set()
            say.note("ouro: stopping running generations now; they publish nothing")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def apply(request: ApplyRequest, ui: ApplyUI, reporter: ClosingReporter) -> ApplyOutcome:
    """Run one apply: ``ApplyError``/``PlanFileError``/``SpecError`` before anything ran
    (not affordable, not confirmed, stale plan, bad specs), else its outcome."""
    check_options(request.executor, deadline=request.deadline_seconds,
                  max_generations=request.max_generations)
    fleet = Fleet(request.state_dir, command="ouro apply")
    prepared = prepare(request, fleet)
    ui.show_plan(prepared.plan)
    worst = check_spend(prepared.plan.lineages, request.max_spend)
    runnable, to_check = prepared.jobs()
    if runnable and not prepared.from_saved_plan and not ui.confirm(worst):
        raise ApplyError("ouro apply: not confirmed; nothing was run")
    if request.executor == "local":
        kernel_store_writer.warm([item.kernel for _, item in runnable if item.pending])

    limits = Limits(
        deadline=None if request.deadline_seconds is None
        else time.monotonic() + request.deadline_seconds,
        max_generations=request.max_generations,
    )
    events = EventLog(fleet.state_dir / EVENTS_FILE)
    audits = AuditBatches(audit_record_dir(request.state_dir),
                          expected=sum(1 for _, item in runnable if item.pending))
    engine = Engine(fleet=fleet, limits=limits, reporter=reporter, events=events,
                    lock_timeout=request.lock_timeout, on_lineage_done=audits.lineage_done,
                    prober=Prober() if request.probe else None)
    width = request.parallel or default_parallelism([s for s, _ in runnable])
    engine.probe_parallel = width
    raise_open_files_limit()
    runner = make_executor(request.executor, engine, fleet.state_dir)
    jobs = [*runnable, *to_check]
    events.emit("apply-started", lineages=[s.name for s, _ in jobs], parallel=width,
                executor=request.executor, worst_case_usd=str(worst))
    try:
        with _interrupts(limits, reporter):
            results = runner.run(jobs, width)
    finally:
        reporter.close()
    by_name = {r.name: r for r in results}
    verdicts = audits.finish(interrupted=limits.stop.is_set())
    lineages = []
    for spec, item in zip(prepared.specs, prepared.plan.lineages, strict=True):
        result = by_name.get(spec.name) or LineageResult.not_run(item)
        result.audit = verdicts.get(spec.name)
        lineages.append(result)
    outcome = ApplyOutcome(lineages, limits.stop.is_set() or limits.cancel.is_set(),
                           limits.why_stopped(), None)
    events.emit("apply-finished", interrupted=outcome.interrupted,
                failed=[r.name for r in outcome.failed],
                unfinished=[r.name for r in outcome.unfinished], stopped_by=outcome.stopped_by)
    return ApplyOutcome(outcome.lineages, outcome.interrupted, outcome.stopped_by,
                        events.failed, any(spec.member is not None and spec.member.selection
                                           is not None for spec in prepared.specs))


__all__ = ["EXIT_INTERRUPTED", "ApplyOutcome", "ApplyRequest", "ApplyUI", "apply", "prepare"]
