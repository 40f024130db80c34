"""Apply: run a plan until the lineages match their specs. Side effects live here.

Flow (fixed and visible, like pyinfra's): observe, plan, show, stop if refused
as a whole, confirm, then per lineage — under its lock — recover leftovers,
re-plan against what is there now, create if needed, and run the missing
generations one at a time. Lineages run in parallel; generations of one lineage
never do. A generation that ran is never re-run: death is a result, not an
error. Only infrastructure that failed before a generation started
(``TransientError``) is retried, here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from reconciler.engine import kernel_store_writer
from reconciler.engine.events import EventLog
from reconciler.engine.fleet import Fleet
from reconciler.engine.forks import birth_fork, fork_source, ran_with_fork
from reconciler.engine.provider_check import Prober, ProbeResult, probe
from reconciler.engine.recorded import source_record
from reconciler.errors import ApplyError, OuroError, PathRefused, host_fault, with_host_remedy
from reconciler.kernel.base import errors as kernel_errors
from reconciler.kernel.base.config import Identity, LineagePaths, ModelConfig
from reconciler.kernel.base.failures import failed_every_call
from reconciler.kernel.base.formats import DASH
from reconciler.ownfiles import write_atomic
from reconciler.plan import LineagePlan, Refusal
from reconciler.plan.continuation import (
    Stop,
    decide,
    probe_first,
    provider_unavailable,
    replay_exhausted,
)
from reconciler.plan.membership import MEMBERSHIP_KEY
from reconciler.plan.planner import until_of
from reconciler.spec.load import LoadedSpec
from reconciler.spec.provenance import spec_provenance
from reconciler.state import preflight
from reconciler.state.failures import failed_streak, replay_cursor
from reconciler.state.observe import Observed, observe
from reconciler.state.stops import stop_path, stop_record

if TYPE_CHECKING:
    from tenacity import Retrying

TRANSIENT_ATTEMPTS = 4
# Descriptors: a running generation holds about ten in this process (pipes to its broker
# and its life, the life's epoll, the seccomp filter's memfd, a socket, the lineage's lock;
# bench/fleet_scale.py measured 10-13). Apply lifts its soft RLIMIT_NOFILE to the hard
# limit, and runs no more lineages at once than that limit holds. (Kernels before physics
# release 3 waited on their broker with select(2), which takes no descriptor past 1,024;
# a lineage born under one runs its stored kernel as a process of its own, whose few
# descriptors never reach that.)
FDS_PER_LINEAGE = 14
FDS_RESERVED = 64  # the apply's own files, the audit child's pipes, the event log, margin


@dataclass
class Limits:
    """Shared stop conditions of one apply; checked at generation boundaries only."""

    deadline: float | None = None  # time.monotonic() value
    max_generations: int | None = None
    stop: threading.Event = field(default_factory=threading.Event)  # first Ctrl-C
    cancel: threading.Event = field(default_factory=threading.Event)  # second Ctrl-C
    _granted: int = 0
    _mutex: threading.Lock = field(default_factory=threading.Lock)
    stopped_by: str | None = None

    def why_stopped(self) -> str | None:
        """Why the apply stopped early, for its summary: the first reason a check found,
        else ``interrupt`` when interrupted (a second Ctrl-C can end the run before any
        check sees the first), else None."""
        with self._mutex:
            if self.stopped_by is None and (self.stop.is_set() or self.cancel.is_set()):
                self.stopped_by = "interrupt"
            return self.stopped_by

    def may_continue(self) -> bool:
        """Neither interrupted nor past the deadline."""
        with self._mutex:
            return self._may_continue()

    def _may_continue(self) -> bool:
        if self.stop.is_set():
            self.stopped_by = self.stopped_by or "interrupt"
            return False
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.stopped_by = self.stopped_by or "deadline"
            return False
        return True

    def _may_take(self) -> bool:
        if not self._may_continue():
            return False
        if self.max_generations is not None and self._granted >= self.max_generations:
            self.stopped_by = self.stopped_by or "max-generations"
            return False
        return True

    def may_take_generation(self) -> bool:
        """Would one more generation be granted now? Reserves nothing (what comes before a
        generation, a probe or a check of the replies, is not done when it could not run)."""
        with self._mutex:
            return self._may_take()

    def take_generation(self) -> bool:
        """May one more generation start? Reserves it if so."""
        with self._mutex:
            if not self._may_take():
                return False
            self._granted += 1
            return True


@dataclass
class LineageResult:
    name: str
    planned_action: str
    generations_run: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    spend_usd: Decimal = Decimal(0)
    errors: list[str] = field(default_factory=list)
    refusal: str | None = None  # the first of ``refusals``' messages
    refusals: tuple[Refusal, ...] = ()  # every reason it was refused for, in the plan's order
    recovered: str | None = None
    final_action: str | None = None
    final_generations: int | None = None
    desired_generations: int = 0
    model_failures: int = 0  # generations whose model calls ended in a provider failure
    last_model_failure: dict[str, Any] | None = None
    stopped: str | None = None  # why apply stopped this lineage (plan.continuation.Stop.code)
    audit: dict[str, Any] | None = None  # the background audit's verdict, once it is in
    measured: int = 0  # probe records written (reconciler.engine.probes)
    probe_failures: int = 0  # of them, probe failures (never the lineage's)

    @classmethod
    def not_run(cls, item: LineagePlan) -> LineageResult:
        """A planned lineage apply did not run (in sync, or stopped first): as planned."""
        return cls(item.name, item.action,
                   refusal=item.message if item.action == "refuse" else None,
                   refusals=item.refusals,
                   final_action=item.action, final_generations=item.observed_generations,
                   desired_generations=item.desired_generations)

    def as_json(self) -> dict[str, Any]:
        """The lineage's entry in apply's JSON report."""
        return {
            "name": self.name,
            "planned_action": self.planned_action,
            "generations_run": self.generations_run,
            "outcomes": dict(sorted(self.outcomes.items())),
            "spend_usd": str(self.spend_usd),
            "errors": self.errors,
            "refusal": self.refusal,
            "reasons": [{"reason": r.reason, "message": r.message} for r in self.refusals],
            "recovered": self.recovered,
            "final_action": self.final_action,
            "observed_generations": self.final_generations,
            "desired_generations": self.desired_generations,
            "audit": self.audit,
            "model_failures": self.model_failures,
            "last_model_failure": self.last_model_failure,
            "stopped": self.stopped,
            "measured": self.measured,
            "probe_failures": self.probe_failures,
        }


class Reporter(Protocol):
    """What apply tells the person (or machine) watching."""

    def lineage_started(self, name: str, done: int, desired: int) -> None: ...
    def generation_started(self, name: str, number: int, desired: int) -> None: ...
    def generation_finished(self, name: str, number: int, outcome: str, spend: Decimal) -> None: ...
    def model_retry(self, name: str, number: int, event: dict[str, Any]) -> None:
        """The broker retries a model call (``event``: attempt, of, http_status, error,
        wait_seconds); called from the generation's own thread."""
        ...
    def lineage_finished(self, result: LineageResult) -> None: ...
    def note(self, message: str) -> None: ...
    def close(self) -> None: ...


def default_parallelism(specs: Sequence[LoadedSpec]) -> int:
    """As many lineages as the host's cores can give their CPU quotas, at least one."""
    if not specs:
        return 1
    cores = os.cpu_count() or 1
    widest = max(s.ceilings().cpu_quota_percent for s in specs)
    return max(1, min(len(specs), (cores * 100) // max(1, widest)))


def lineages_at_once(parallel: int, open_now: int | None = None,
                     limit: int | None = None) -> int:
    """``parallel``, lowered to what keeps this process's descriptors within ``limit``
    (default: the soft RLIMIT_NOFILE; ``open_now``: descriptors open now, from /proc)."""
    if limit is None:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            return max(1, parallel)
    if open_now is None:
        try:
            open_now = len(os.listdir("/proc/self/fd"))
        except OSError:
            open_now = FDS_RESERVED
    room = limit - open_now - FDS_RESERVED
    return max(1, min(parallel, room // FDS_PER_LINEAGE))


def _retrying() -> Retrying:
    from tenacity import (
        Retrying,
        retry_if_exception_type,
        stop_after_attempt,
        wait_exponential,
        wait_random,
    )

    return Retrying(
        retry=retry_if_exception_type(kernel_errors.TransientError),
        stop=stop_after_attempt(TRANSIENT_ATTEMPTS),
        wait=wait_exponential(multiplier=0.2, max=3.0) + wait_random(0, 0.2),
        reraise=True,
    )


def unexpected(error: BaseException, name: str) -> str:
    """What a lineage stopped by an exception no layer named reports: a host fault (a full
    disk, a quota) named with its remedy, the same in every executor and at any
    ``--parallel``; anything else is a bug in ouro."""
    fault = host_fault(error, f"lineage {name} wrote to the host")
    if fault is not None:
        return str(fault)
    return (f"ouro: internal error ({type(error).__name__}: "
            f"{' '.join(str(error).split())}); this is a bug in ouro")


@dataclass
class Engine:
    """Runs lineages; one instance per apply."""

    fleet: Fleet  # the state dir, the instrument, the kernel store, the preflight
    limits: Limits
    reporter: Reporter
    events: EventLog
    lock_timeout: float
    on_lineage_done: Callable[[LoadedSpec], None] | None = None
    prober: Prober | None = None  # None: --no-provider-check
    probe_parallel: int = 1  # measurements at a time (apply's --parallel)
    # After a generation whose every call failed retryably, the provider is probed again
    # (uncached, even under --no-provider-check) before the next one starts.
    recheck: Callable[[ModelConfig, str | None], ProbeResult] = field(
        default_factory=lambda: probe)

    @property
    def identity(self) -> Identity:
        return self.fleet.identity

    def _kernel(self, current: LineagePlan, observed: Observed,
                spec: LoadedSpec | None = None) -> kernel_store_writer.LineageKernel:
        """The lineage's chosen kernel, ready: every kernel is in the store before it
        births, recovers or extends a lineage. A fork to be born under its parent's
        kernel is told the parent's recorded identity (repository and ref too)."""
        metadata = observed.lineage_metadata
        if (metadata is None and spec is not None and spec.fork is not None
                and spec.fork.kernel == "parent"):
            source = fork_source(spec, observed)
            metadata = source.metadata if source is not None else None
        kernel = kernel_store_writer.prepare(self.fleet.store, self.identity, current.kernel,
                                             metadata)
        recorded = source_record(spec) if spec is not None else None
        if recorded is None:
            return kernel
        # provider recorded: every observation names the replies it was answered with
        return dataclasses.replace(kernel, ran_with={**kernel.ran_with, "recorded": recorded})

    def _birth(self, spec: LoadedSpec, paths: LineagePaths,
               kernel: kernel_store_writer.LineageKernel) -> None:
        """Create the lineage: the kernel's canonical seed, or a fork's (``engine.forks``)."""
        if spec.fork is None:
            for attempt in _retrying():
                with attempt:
                    kernel.birth(paths)
            self.events.emit("created", lineage=spec.name, path=str(paths.worktree),
                             kernel=kernel.ran_with["kernel"])
            return
        record = birth_fork(paths, spec, kernel.identity)
        self.events.emit("created", lineage=spec.name, path=str(paths.worktree),
                         kernel=kernel.ran_with["kernel"], fork=record)

    def run(
        self, jobs: Sequence[tuple[LoadedSpec, LineagePlan]], parallel: int
    ) -> list[LineageResult]:
        results: list[LineageResult] = []
        width = lineages_at_once(max(1, parallel))
        if width < min(parallel, len(jobs)):
            self.reporter.note(
                f"ouro: {width} lineages at once, not {min(parallel, len(jobs))}: a running "
                f"lineage holds about {FDS_PER_LINEAGE} open files and this process may open "
                f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]} (raise it with `ulimit -n`); "
                f"the others start as these finish")
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="lineage") as pool:
            futures: list[tuple[LoadedSpec, LineagePlan, Future[LineageResult]]] = [
                (spec, planned, pool.submit(self.run_lineage, spec, planned))
                for spec, planned in jobs
            ]
            for spec, planned, future in futures:
                while True:
                    try:
                        results.append(future.result(timeout=0.2))
                        break
                    except TimeoutError:
                        continue
                    except Exception as error:  # a bug in one lineage must not hide the others
                        result = LineageResult(spec.name, planned.action)
                        result.errors.append(unexpected(error, spec.name))
                        results.append(result)
                        break
        return results

    def run_lineage(self, spec: LoadedSpec, planned: LineagePlan) -> LineageResult:
        result = LineageResult(
            spec.name, planned.action, desired_generations=spec.spec.spec.generations
        )
        kernel: kernel_store_writer.LineageKernel | None = None
        try:
            with self.fleet.lock(spec, self.lock_timeout) as lock:
                paths = self.fleet.where(spec)  # under the lock: the branches as they are now
                observed = self.fleet.observe(spec, at=paths)
                current = self.fleet.plan_one(spec, observed)
                if current.action == "recover":
                    kernel = self._kernel(current, observed)
                    report = kernel.recover(paths)
                    result.recovered = str(report)
                    self.events.emit("recovered", lineage=spec.name, report=str(report))
                    self.reporter.note(
                        f"{spec.name}: recovered an interrupted generation ({report})"
                    )
                    observed = self.fleet.observe(spec, at=paths)
                    current = self.fleet.plan_one(spec, observed)
                if current.action == "refuse":
                    lock.untouched = result.recovered is None  # left as it was found
                    result.refusal, result.refusals = current.message, current.refusals
                    self.events.emit(
                        "refused", lineage=spec.name, reason=current.reason,
                        message=current.message,
                        reasons=[r.reason for r in current.refusals],
                    )
                    return self._finish(spec, result, current)
                if planned.action == "refuse" and current.pending:
                    # Refused when planned, runnable now: another apply was at work on it.
                    # Its spend was never shown or checked against --max-spend: plan again.
                    result.errors.append(
                        f"ouro: lineage {spec.name} changed while this apply was planning "
                        f"(now: {current.message}); run apply again to continue it"
                    )
                    lock.untouched = result.recovered is None
                    return self._finish(spec, result, current)
                # (a missing key or replay folder was refused by the plan, before creating)
                api_key = preflight.api_key(spec.model())
                if current.pending and self.probe_refuses(spec, api_key, result):
                    lock.untouched = result.recovered is None  # nothing was created
                    return self._finish(spec, result, current)
                if current.action == "create" and not self.limits.may_continue():
                    return self._finish(spec, result, current)
                current = self._measured_first(spec, paths, result, current)
                if current.pending and kernel is None:
                    kernel = self._kernel(current, observed, spec)
                if current.action == "create" and kernel is not None:
                    self._birth(spec, paths, kernel)
                if kernel is not None:  # (the newest failure: a probe may come first)
                    self._run_generations(spec, current, result, api_key, kernel, (
                        observed.last_observation or {}).get("provider_failure"))
                else:
                    self.reporter.lineage_started(spec.name, current.observed_generations,
                                                  current.desired_generations)
        except kernel_errors.DamageError as error:  # a damaged place: a refusal, with its repair
            result.refusal = str(error)
            self.events.emit("refused", lineage=spec.name, reason=error.reason, message=str(error))
        except (OuroError, kernel_errors.KernelError) as error:
            said = with_host_remedy(str(error))  # (a kernel's full disk: its remedy named)
            result.errors.append(said)
            self.events.emit("error", lineage=spec.name, error=said, kind=type(error).__name__)
        except Exception as error:  # a bug (or a host fault): this lineage stops, keeping
            message = unexpected(error, spec.name)  # what it ran
            result.errors.append(message)
            self.events.emit("error", lineage=spec.name, error=message,
                             kind=type(error).__name__)
        finally:
            if kernel is not None:
                kernel.close()
        return self._finish(spec, result)

    def _retry_listener(self, name: str, number: int) -> Callable[[dict[str, Any]], None]:
        """The broker's reports of one generation -> events.jsonl and the live progress."""

        def heard(event: dict[str, Any]) -> None:
            if event.get("event") != "retry":
                return
            fields = {key: event.get(key) for key in
                      ("request_index", "attempt", "of", "http_status", "error", "wait_seconds")}
            self.events.emit("model-retry", lineage=name, generation=number, **fields)
            self.reporter.model_retry(name, number, fields)

        return heard

    def probe_refuses(self, spec: LoadedSpec, api_key: str | None,
                       result: LineageResult) -> bool:
        """A free authenticated request before anything is created or run (``probe``):
        False when the provider takes it, else True with why not and the remedy recorded.
        Executors that run lineages elsewhere (Slurm) call it before they submit."""
        if self.prober is None:
            return False
        model = spec.model()
        found = self.prober.check(model, api_key)
        if found.ok:
            return False
        self.events.emit("probe-failed", lineage=spec.name, provider=model.provider,
                         code=found.code, http_status=found.http_status, message=found.message)
        result.errors.append(
            f"ouro: lineage {spec.name}: {found.message}; nothing was created or run: "
            f"{found.remedy or 'fix the provider'} (or pass --no-provider-check)")
        return True

    def _still_down(self, spec: LoadedSpec, done: int, failure: Any,
                    api_key: str | None) -> Stop | None:
        """Before generation ``done + 1``: a replay lineage stops when its folder has no
        reply left for it (the replies used through ``done`` are all there are); when
        generation ``done`` had every call fail retryably, the provider is probed: the
        stop if it still does not answer, else None."""
        model = spec.model()
        if model.provider == "replay" and model.replay_dir is not None:
            from reconciler.kernel.broker.providers import replay_files

            try:
                replies = len(replay_files(model.replay_dir))
            except OSError:  # the generation's own check says what is wrong with the folder
                return None
            used = replay_cursor(self.fleet.where(spec), done) if done else 0
            return replay_exhausted(done, failure if isinstance(failure, dict) else None,
                                    str(model.replay_dir), replies, used)
        if not done or not isinstance(failure, dict):
            return None
        if not probe_first(failure):
            return None
        try:
            found = self.recheck(model, api_key)
        except Exception as error:  # a bug in the probe must not stop a lineage
            self.reporter.note(f"{spec.name}: the probe failed ({type(error).__name__})")
            return None
        self.events.emit("probe", lineage=spec.name, after_generation=done,
                         code=found.code, http_status=found.http_status, message=found.message)
        if found.ok and (found.http_status or 0) < 500:
            self.reporter.note(f"{spec.name}: every model call of gen {done} failed; the "
                               f"provider answers now ({found.code}): going on")
            return None
        return provider_unavailable(done, failure, found.message, found.remedy)

    def _stopped(self, spec: LoadedSpec, result: LineageResult, done: int, stop: Stop,
                 *, before_next: bool = False) -> None:
        where = f"before gen {done + 1}" if before_next else f"after gen {done}"
        result.stopped = stop.code
        result.errors.append(f"ouro: lineage {spec.name} stopped {where}: {stop.message}")
        self.events.emit("lineage-stopped", lineage=spec.name, generation=done,
                         reason=stop.code, message=stop.message)
        if before_next:  # no generation records it: plan and the viewer read this record
            self._record_stop(spec, done, stop)

    def _record_stop(self, spec: LoadedSpec, done: int, stop: Stop) -> None:
        """The stop before generation ``done + 1``, beside the lineage's lock
        (``reconciler.state.stops``); a record that cannot be written is only noted."""
        paths = self.fleet.where(spec)
        try:
            write_atomic(stop_path(paths.git_dir),
                         stop_record(paths, done, stop.code, stop.message),
                         what=f"the stop record of lineage {spec.name}", mode=0o644)
        except (PathRefused, OSError) as error:
            self.reporter.note(f"{spec.name}: the stop was not recorded for plan and the "
                               f"viewer ({error}); events.jsonl has it")

    def _run_generations(
        self, spec: LoadedSpec, current: LineagePlan, result: LineageResult, api_key: str | None,
        kernel: kernel_store_writer.LineageKernel, previous: Any = None,
    ) -> None:
        """The missing generations, one at a time; ``previous``: the provider failure the
        newest generation recorded (a probe comes first if it says the provider was down)."""
        from reconciler.kernel.transaction import generation

        paths = self.fleet.where(spec)
        desired = current.desired_generations
        done = current.observed_generations
        model = spec.model()
        ceilings = spec.ceilings()
        provenance = spec_provenance(spec.file, spec.sha256)
        # every generation records the set it ran in (``plan.membership``: a member never
        # takes over a lineage born outside its set)
        kernel = dataclasses.replace(kernel, ran_with={**kernel.ran_with,
                                                       MEMBERSHIP_KEY: spec.set_name})
        max_failed = spec.spec.spec.model.max_failed_generations
        # the run of failed generations goes on across applies: one more, then stop again
        streak = failed_streak(paths, done, max_failed) if done else 0
        self.reporter.lineage_started(spec.name, done, desired)
        while done < desired:
            if not self.limits.may_take_generation():
                return
            down = self._still_down(spec, done, previous, api_key)
            if down is not None:
                self._stopped(spec, result, done, down, before_next=True)
                return
            if not self.limits.take_generation():
                return
            number = done + 1
            runs = kernel if number != 1 or spec.fork is None else _first(kernel, paths)
            self.reporter.generation_started(spec.name, number, desired)
            self.events.emit("generation-started", lineage=spec.name, generation=number)
            try:
                for attempt in _retrying():
                    with attempt:
                        outcome = runs.generation(
                            paths=paths, model=model, ceilings=ceilings, api_key=api_key,
                            provenance=provenance, cancel=self.limits.cancel,
                            on_event=self._retry_listener(spec.name, number),
                        )
            except generation.GenerationCancelled:
                self.events.emit("generation-cancelled", lineage=spec.name, generation=number)
                self.reporter.note(f"{spec.name}: gen {number} stopped; nothing was published")
                return
            done = outcome.generation
            previous = failure = outcome.provider_failure
            streak = streak + 1 if failed_every_call(failure) else 0
            result.generations_run += 1
            result.outcomes[outcome.status] += 1
            result.spend_usd += outcome.accounted_usd
            if failure is not None:
                result.model_failures += 1
                result.last_model_failure = dict(failure, generation=done)
            self.events.emit(
                "generation", lineage=spec.name, generation=outcome.generation,
                status=outcome.status, outcome=outcome.outcome,
                lineage_commit=outcome.lineage_commit, spend_usd=str(outcome.accounted_usd),
                kernel=kernel.source, provider_failure=failure,
                usage_exceeds_request=outcome.usage_exceeds_request,
            )
            shown = outcome.outcome + (f" {DASH} {failure['message']}" if failure else "")
            self.reporter.generation_finished(
                spec.name, outcome.generation, shown, outcome.accounted_usd
            )
            self._measure(spec, paths, result, only=done)  # the new generation, at once
            stop = decide(failure, outcome.usage_exceeds_request, failed_in_a_row=streak,
                          max_failed=max_failed, model=model.name,
                          variable=model.api_key_env if api_key else None)  # a key sent
            if stop is not None:
                self._stopped(spec, result, done, stop)
                return
            if self.limits.cancel.is_set():
                return
            if self._until_stops(spec, paths, done, result):
                return

    def _measured_first(self, spec: LoadedSpec, paths: LineagePaths, result: LineageResult,
                        current: LineagePlan) -> LineagePlan:
        """Back-fill the lineage's history before any generation runs (``spec.until`` reads
        it); the plan again if anything was measured."""
        if current.action == "create" or not self._measure(spec, paths, result):
            return current
        return self.fleet.plan_one(spec, self.fleet.observe(spec, at=paths))

    def _until_stops(self, spec: LoadedSpec, paths: LineagePaths, done: int,
                     result: LineageResult) -> bool:
        """Does ``spec.until`` hold after generation ``done``? Then the lineage is done."""
        if not spec.spec.spec.until:
            return False
        until = until_of(spec, self.fleet.observe(spec, at=paths), done)
        if until is None:
            return False
        result.stopped = until.code
        self.reporter.note(f"{spec.name}: done after gen {done}: {until.message}")
        self.events.emit("lineage-stopped", lineage=spec.name, generation=done,
                         reason=until.code, message=until.message)
        return True

    def _measure(self, spec: LoadedSpec, paths: LineagePaths, result: LineageResult,
                 only: int | None = None) -> int:
        """Measure what the probes lack (``only``: of that generation); under the lock.
        Returns how many records were written."""
        if not spec.probes or self.limits.cancel.is_set():
            return 0
        from reconciler.engine.probes.measure import measure_missing

        done = measure_missing(paths, spec.probes, parallel=self.probe_parallel,
                               cancel=self.limits.cancel, only=only)
        result.measured += done.records
        result.probe_failures += done.failures
        for error in done.errors:
            result.errors.append(f"ouro: lineage {spec.name}: {error}")
        if done.records or done.errors:
            self.events.emit("measured", lineage=spec.name, records=done.records,
                             probe_failures=done.failures, errors=done.errors)
        return done.records

    def _finish(self, spec: LoadedSpec, result: LineageResult,
                unchanged: LineagePlan | None = None) -> LineageResult:
        """Where the lineage is now: ``unchanged`` when it is the plan made under the lock and
        nothing was written since (no observe again), else observed and planned afresh."""
        try:
            final = unchanged or self.fleet.plan_one(spec)
            result.final_action = final.action
            result.final_generations = final.observed_generations
        except OuroError as error:
            result.errors.append(str(error))
        self.reporter.lineage_finished(result)
        if self.on_lineage_done is not None and result.generations_run:
            self.on_lineage_done(spec)
        return result


def _first(kernel: kernel_store_writer.LineageKernel,
           paths: LineagePaths) -> kernel_store_writer.LineageKernel:
    """Generation 1 of a fork records its ancestry in its ``ran_with`` (its first
    observation), as the root metadata has it (read for forks only: a lineage that is
    no fork is not observed again for it)."""
    record = ran_with_fork(observe(paths).lineage_metadata)
    if record is None:
        return kernel
    return dataclasses.replace(kernel, ran_with={**kernel.ran_with, "fork": record})


def check_spend(plans: Sequence[LineagePlan], max_spend: Decimal | None) -> Decimal:
    """The plan's worst case; refuses the whole apply when it is above ``max_spend``."""
    worst = sum((p.max_spend_usd for p in plans if p.pending), Decimal(0))
    if max_spend is not None and worst > max_spend:
        raise ApplyError(
            f"ouro: the plan may spend up to ${worst} (missing generations × budget_usd), above "
            f"--max-spend ${max_spend}: nothing was run; raise --max-spend, lower generations or "
            "budget_usd, or apply fewer lineages with --select"
        )
    return worst


__all__ = ["Engine", "Limits", "LineageResult", "Reporter", "check_spend", "default_parallelism",
           "lineages_at_once"]
