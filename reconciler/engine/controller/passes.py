"""One reconcile pass: plan the revision's lineages, run what is missing, derive conditions.

Rule: reading is cheap when nothing moved. A lineage whose spec digest and repository
heads are those of a pass that left it finished (in sync, ahead, done, suspended) is not
observed again (``reconciler.state.summaries.heads`` reads refs, no object); one stopped
for a reason only a person can remove (a model failure, a refusal of usage) is not run
again until its spec or its heads change; one stopped by a provider outage is run again
at the next pass, whose engine probes the provider before the next generation starts.
Everything is run by apply's engine (``reconciler.engine.apply.Engine``) through the
chosen executor, each lineage under its own lock, never waiting for one another apply
holds (it is tried again at the next pass).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from reconciler.engine.apply import Engine, LineageResult, Reporter, default_parallelism
from reconciler.engine.audits import AuditBatches
from reconciler.engine.controller import conditions
from reconciler.engine.controller.budget import DailyBudget, PassLimits
from reconciler.engine.events import EVENTS_FILE, EventLog
from reconciler.engine.executors import make_executor
from reconciler.engine.fleet import Fleet
from reconciler.engine.provider_check import Prober
from reconciler.kernel.base.config import Identity
from reconciler.plan import LineagePlan
from reconciler.plan.planner import suspended
from reconciler.plan.probes import GOAL_STOPS, UntilStop
from reconciler.spec.load import LoadedSpec
from reconciler.state.conditions import LineageConditions
from reconciler.state.fleet import audit_record_dir
from reconciler.state.summaries import heads

__all__ = ["Heard", "PassResult", "Passes", "WatchedLog"]

_FINISHED = ("in-sync", "ahead", "done", "suspended")
_RETRIED_STOPS = ("provider-unavailable",)  # an outage: tried again after a probe

Heard = Callable[[str, dict[str, Any]], None]
_Key = tuple[str, tuple[str | None, str | None]]


class WatchedLog(EventLog):
    """The event log, each event also handed to ``heard`` (the controller's transitions)."""

    def __init__(self, path: Path, heard: Heard) -> None:
        super().__init__(path)
        self._heard = heard

    def emit(self, event: str, **fields: Any) -> None:
        super().emit(event, **fields)
        self._heard(event, fields)


class _BudgetReporter:
    """The CLI's reporter, and each finished generation's spend counted in the budget."""

    def __init__(self, inner: Reporter, budget: DailyBudget | None) -> None:
        self.inner, self.budget = inner, budget

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generation_finished(self, name: str, number: int, outcome: str, spend: Decimal) -> None:
        if self.budget is not None:
            self.budget.finished(spend)
        self.inner.generation_finished(name, number, outcome, spend)


@dataclass
class PassResult:
    ran: int = 0  # generations run
    cut_by_deadline: bool = False  # work is left that the next pass goes on with
    budget_blocked: str | None = None  # why the day's budget stopped generations


@dataclass
class Passes:
    """The state a controller keeps between passes: in memory only (a cache)."""

    state_dir: Path
    identity: Identity
    reporter: Reporter
    heard: Heard
    settled: dict[str, _Key] = field(default_factory=dict)  # finished as of this key
    held: dict[str, _Key] = field(default_factory=dict)  # stopped for a person as of this key
    views: dict[str, LineageConditions] = field(default_factory=dict)
    # the lineages this pass found done by their spec.until without running any (the
    # condition became true because the spec changed): the controller notifies them
    done_by_spec: dict[str, UntilStop] = field(default_factory=dict)
    limits: PassLimits | None = None  # of the pass running now (signals reach it)
    clock: conditions.Clock = conditions.now  # stamps the conditions' transitions

    def forget(self) -> None:
        """Observe everything again at the next pass (SIGHUP)."""
        self.settled.clear()
        self.held.clear()

    def fleet(self) -> Fleet:
        """The fleet of one pass (its kernel store checked again each pass)."""
        return Fleet(self.state_dir, command="ouro controller", identity=self.identity)

    def _key(self, spec: LoadedSpec) -> _Key:
        return (spec.sha256, heads(self.fleet().where(spec)))

    def run(self, specs: Sequence[LoadedSpec], *, executor: str, parallel: int | None,
            interval: float, budget: DailyBudget | None) -> PassResult:
        """One pass over ``specs``: plan the lineages that may have moved, run the pending."""
        fleet = self.fleet()
        self.done_by_spec = {}
        fleet.store  # noqa: B018  (checked once a pass, refused if others can write it)
        keys = {spec.name: self._key(spec) for spec in specs}
        stale = [spec for spec in specs if self.settled.get(spec.name) != keys[spec.name]]
        plan = fleet.plan(stale)
        items = dict(zip([s.name for s in stale], plan.lineages, strict=True))
        runnable = [(spec, items[spec.name]) for spec in stale
                    if (items[spec.name].pending or items[spec.name].measure.measurements)
                    and self.held.get(spec.name) != keys[spec.name]]
        outcome = PassResult()
        results: dict[str, LineageResult] = {}
        if runnable:
            results = self._execute(runnable, executor, parallel, interval, budget, fleet)
            outcome.ran = sum(r.generations_run for r in results.values())
            assert self.limits is not None
            outcome.cut_by_deadline = self.limits.stopped_by == "deadline"
            if budget is not None and budget.blocked:
                outcome.budget_blocked = budget.message()
        for spec in stale:
            self._conclude(spec, items[spec.name], results.get(spec.name), keys[spec.name],
                           outcome.budget_blocked)
        return outcome

    def _execute(self, runnable: list[tuple[LoadedSpec, LineagePlan]], executor: str,
                 parallel: int | None, interval: float, budget: DailyBudget | None,
                 fleet: Fleet) -> dict[str, LineageResult]:
        local = executor == "local"
        self.limits = PassLimits(deadline=time.monotonic() + interval if local else None,
                                 budget=budget)
        events = WatchedLog(self.state_dir / EVENTS_FILE, self.heard)
        audits = AuditBatches(audit_record_dir(self.state_dir))
        engine = Engine(fleet=fleet, limits=self.limits,
                        reporter=_BudgetReporter(self.reporter, budget),
                        events=events, lock_timeout=0, on_lineage_done=audits.lineage_done,
                        prober=Prober())
        width = parallel or default_parallelism([s for s, _ in runnable])
        engine.probe_parallel = width
        runner = make_executor(executor, engine, self.state_dir)
        events.emit("apply-started", lineages=[s.name for s, _ in runnable], parallel=width,
                    executor=executor, controller=True,
                    worst_case_usd=str(sum((i.max_spend_usd for _, i in runnable), Decimal(0))))
        results = runner.run(runnable, width)
        audits.finish(interrupted=self.limits.stop.is_set())
        events.emit("apply-finished", interrupted=self.limits.stop.is_set(), controller=True,
                    stopped_by=self.limits.stopped_by)
        return {r.name: r for r in results}

    def _conclude(self, spec: LoadedSpec, item: LineagePlan, result: LineageResult | None,
                  key: _Key, budget_blocked: str | None) -> None:
        """The lineage's conditions after the pass, and whether the next pass may skip it."""
        action: str = item.action
        message = item.message
        generations = item.observed_generations
        stalled: tuple[str, str] | None = None
        if item.action == "refuse":
            stalled = (item.reason or "refuse", item.message)
        if result is not None:
            action = result.final_action or action
            message = f"lineage {spec.name}: {action} after this pass"
            generations = (result.final_generations if result.final_generations is not None
                           else generations)
            key = self._key(spec)
            if result.refusal is not None:
                reason = result.refusals[0].reason if result.refusals else "refuse"
                stalled = (reason, result.refusal)
            elif result.stopped is not None and result.stopped not in GOAL_STOPS:
                stalled = (result.stopped, result.errors[-1] if result.errors else "")
                if result.stopped not in _RETRIED_STOPS:
                    self.held[spec.name] = key
            elif result.errors:
                stalled = ("error", result.errors[-1])
        if result is None and item.action == "done" and item.until is not None:
            self.done_by_spec[spec.name] = item.until
        if stalled is None and budget_blocked and action in ("create", "extend", "recover"):
            stalled = ("daily-budget", budget_blocked)
        if action in _FINISHED and stalled is None:
            self.settled[spec.name] = key
        else:
            self.settled.pop(spec.name, None)
        view = conditions.LineageView(
            spec.name, action, message, generations, item.desired_generations,
            suspended=suspended(spec), stalled_reason=stalled[0] if stalled else None,
            stalled_message=stalled[1] if stalled else "",
            running=bool(result and result.generations_run))
        self.views[spec.name] = conditions.derive(view, self.views.get(spec.name),
                                                   self.clock)
