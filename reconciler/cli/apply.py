"""CLI: `ouro apply`: reconcile specs until the lineages match.

The flow is fixed and visible: load, observe, plan, show, refuse the whole
apply if it cannot be afforded, confirm, run, report. Ctrl-C once: running
generations finish, no new ones start; twice: running generations end now,
publishing nothing. Either way the repositories are left consistent.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from reconciler.errors import ApplyError, OuroError, PlanFileError

EXIT_INTERRUPTED = 130
REPORT_FORMAT = "ouro-apply-report/v1"


def _money(text: str | None) -> Decimal | None:
    if text is None:
        return None
    try:
        value = Decimal(text.strip().lstrip("$"))
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value < 0:
        raise ApplyError(f"ouro apply: --max-spend {text!r} is not an amount of USD (e.g. 2.50)")
    return value


def _duration(text: str | None) -> float | None:
    if text is None:
        return None
    from reconciler.spec.units import parse_duration

    try:
        return float(parse_duration(text))
    except (ValueError, TypeError) as error:
        raise ApplyError(f"ouro apply: --deadline {text!r}: {error} (e.g. 90s, 10m, 2h)") from error


@contextmanager
def _interrupts(stop: Any, cancel: Any, say: Any) -> Iterator[None]:
    """First SIGINT/SIGTERM: stop starting generations; second: cancel running ones."""

    def handler(signum: int, frame: FrameType | None) -> None:
        del frame
        if not stop.is_set():
            stop.set()
            say(
                f"ouro: {signal.Signals(signum).name}: finishing running generations, starting "
                "no new ones (again to stop them now, publishing nothing)"
            )
        else:
            cancel.set()
            say("ouro: stopping running generations now; they publish nothing")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def _load_for_plan_file(plan_path: Path, state_dir: Path | None) -> tuple[Any, list[Any]]:
    from reconciler.plan.saved import load_plan
    from reconciler.spec.load import load_specs

    saved = load_plan(plan_path)
    files = sorted({item.spec_file for item in saved.lineages if item.spec_file})
    missing = [item.name for item in saved.lineages if not item.spec_file]
    if missing:
        raise PlanFileError(
            f"ouro apply: {plan_path}: the plan does not say where the specs of "
            f"{', '.join(missing)} are: make it again with `ouro plan PATH -o FILE`"
        )
    specs = load_specs([Path(f) for f in files], state_dir=state_dir)
    wanted = {item.name for item in saved.lineages}
    return saved, [spec for spec in specs if spec.name in wanted]


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
    select: Annotated[
        list[str] | None, typer.Option("--select", help="only these lineages (repeatable)")
    ] = None,
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
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON report at the end")] = False,
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="default folder of lineages")
    ] = None,
) -> None:
    """Reconcile: run the missing generations until every lineage matches its spec."""
    from reconciler.engine.apply import Engine, Limits, check_spend, default_parallelism
    from reconciler.engine.events import EventLog
    from reconciler.plan import make_plan
    from reconciler.plan.saved import check_fresh
    from reconciler.report import render
    from reconciler.report.progress import LiveReporter, PlainReporter, SilentReporter
    from reconciler.spec.load import load_specs
    from reconciler.spec.load import state_dir as resolve_state_dir
    from reconciler.state import instrument
    from reconciler.state.observe import observe

    spend_cap = _money(max_spend)
    deadline_seconds = _duration(deadline)
    identity = instrument.current()

    saved = None
    if len(paths) == 1 and paths[0].is_file() and paths[0].suffix == ".json":
        saved, specs = _load_for_plan_file(paths[0], state_dir)
    else:
        specs = load_specs(paths, state_dir=state_dir)
    if select:
        unknown = sorted(set(select) - {s.name for s in specs})
        if unknown:
            raise ApplyError(
                f"ouro apply: --select {', '.join(unknown)}: no such lineage in "
                f"the specs (known: {', '.join(s.name for s in specs) or 'none'})"
            )
        specs = [s for s in specs if s.name in select]

    observed = {spec.name: observe(spec.paths()) for spec in specs}
    plan = make_plan([(spec, observed[spec.name]) for spec in specs], identity)
    if saved is not None:
        stale = check_fresh(
            saved, observed, instrument=identity, spec_digests={s.name: s.sha256 for s in specs}
        )
        if stale:
            raise PlanFileError(
                f"ouro apply: the saved plan {paths[0]} is stale; nothing was run:\n  "
                + "\n  ".join(stale)
                + "\nmake a new plan with `ouro plan ... -o FILE`"
            )

    if not as_json:
        render.print_plan(plan, sys.stderr)
    worst = check_spend(plan.lineages, spend_cap)
    runnable = [
        (spec, item) for spec, item in zip(specs, plan.lineages, strict=True) if item.pending
    ]
    # A refusal seen without the lock may be another apply's work in progress (a lineage
    # half created, an observation ahead of its commit): it is confirmed under the lock.
    to_check = [
        (spec, item)
        for spec, item in zip(specs, plan.lineages, strict=True)
        if item.action == "refuse"
    ]
    if runnable and not yes:
        if not sys.stdin.isatty():
            raise ApplyError(
                "ouro apply: no terminal to confirm on: pass --yes to apply without confirmation"
            )
        if not typer.confirm(f"Apply? (worst-case spend ${worst})", default=False, err=True):
            raise ApplyError("ouro apply: not confirmed; nothing was run")

    limits = Limits(
        deadline=None if deadline_seconds is None else time.monotonic() + deadline_seconds,
        max_generations=max_generations,
    )
    if as_json:
        reporter: PlainReporter = SilentReporter()
    elif sys.stderr.isatty():
        reporter = LiveReporter()
    else:
        reporter = PlainReporter()
    events = EventLog(resolve_state_dir(state_dir) / "events.jsonl")
    audits = _Audits()
    engine = Engine(
        identity=identity,
        limits=limits,
        reporter=reporter,
        events=events,
        lock_timeout=lock_timeout,
        on_lineage_done=audits.lineage_done,
    )
    width = parallel or default_parallelism([s for s, _ in runnable])
    jobs = [*runnable, *to_check]
    events.emit(
        "apply-started",
        lineages=[s.name for s, _ in jobs],
        parallel=width,
        worst_case_usd=str(worst),
    )
    try:
        with _interrupts(limits.stop, limits.cancel, reporter.note):
            results = engine.run(jobs, width)
    finally:
        reporter.close()
    by_name = {r.name: r for r in results}

    verdicts = audits.finish(interrupted=limits.stop.is_set())
    lineages = []
    for spec, item in zip(specs, plan.lineages, strict=True):
        result = by_name.get(spec.name)
        entry = (
            result.as_json()
            if result is not None
            else {
                "name": item.name,
                "planned_action": item.action,
                "generations_run": 0,
                "outcomes": {},
                "spend_usd": "0",
                "errors": [],
                "refusal": item.message if item.action == "refuse" else None,
                "recovered": None,
                "final_action": item.action,
                "observed_generations": item.observed_generations,
                "desired_generations": item.desired_generations,
            }
        )
        entry["audit"] = verdicts.get(spec.name)
        lineages.append(entry)

    interrupted = limits.stop.is_set() or limits.cancel.is_set()
    failed = [e for e in lineages if e["errors"] or e["refusal"] or e["final_action"] == "refuse"]
    unfinished = [e for e in lineages if e["final_action"] in ("create", "extend", "recover")]
    events.emit(
        "apply-finished",
        interrupted=interrupted,
        failed=[e["name"] for e in failed],
        unfinished=[e["name"] for e in unfinished],
        stopped_by=limits.stopped_by,
    )
    if as_json:
        document = {
            "format_version": REPORT_FORMAT,
            "interrupted": interrupted,
            "stopped_by": limits.stopped_by,
            "lineages": lineages,
        }
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        _summary(lineages, limits.stopped_by, events.failed)
    if interrupted:
        raise SystemExit(EXIT_INTERRUPTED)
    if failed:
        raise SystemExit(1)
    if unfinished and limits.stopped_by not in ("deadline", "max-generations"):
        raise SystemExit(1)


class _Audits:
    """Audit the lineages apply touched, off the generations' path: one child at a time,
    each taking every lineage that finished since the last one started (a child per
    lineage would cost a Python start-up each, taken from the generations still running).
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiting: list[Any] = []
        self._handles: list[Any] = []

    def lineage_done(self, spec: Any) -> None:
        with self._mutex:
            self._waiting.append(spec)
            if not self._handles or self._handles[-1].done:
                self._launch()

    def _launch(self) -> None:
        from reconciler.engine.verify import start_background_audit

        if self._waiting:
            items = [(spec.name, spec.paths()) for spec in self._waiting]
            self._handles.append(start_background_audit(items))
            self._waiting = []

    def finish(self, *, interrupted: bool) -> dict[str, Any]:
        """Every verdict by lineage name; after an interrupt, running audits are stopped."""
        with self._mutex:
            if not interrupted:
                self._launch()
            handles = list(self._handles)
        verdicts: dict[str, Any] = {}
        for handle in handles:
            if interrupted:
                handle.stop()
            try:
                report = handle.result(120.0)
            except (TimeoutError, OuroError):
                handle.stop()
                continue
            for lineage in report.lineages:
                verdicts[lineage.lineage] = {
                    "status": lineage.status,
                    "findings": [
                        f"{f.code} (gen {f.generation})" if f.generation else f.code
                        for f in lineage.findings
                    ],
                }
        return verdicts


def _summary(
    lineages: list[dict[str, Any]], stopped_by: str | None, log_failed: str | None
) -> None:
    ran = sum(e["generations_run"] for e in lineages)
    spent = sum((Decimal(e["spend_usd"]) for e in lineages), Decimal(0))
    for entry in lineages:
        audit = entry.get("audit")
        if audit is not None:
            findings = "; ".join(audit["findings"])
            print(
                f"{entry['name']}: verify: {audit['status']}"
                + (f" ({findings})" if findings else ""),
                file=sys.stderr,
            )
    line = f"Applied: {ran} generations run, ${spent} spent."
    if stopped_by:
        line += f" Stopped early ({stopped_by}); the next apply continues."
    print(line, file=sys.stderr)
    if log_failed:
        print(f"ouro: warning: the event log could not be written ({log_failed})", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("apply")(apply_command)
