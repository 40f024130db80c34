"""One lineage, run where a remote executor put it: a JSON request in, a JSON result out.

This is the whole contract between a submitting apply and the node that runs the
lineage (a Slurm job today, a Kubernetes pod tomorrow): the request names the spec
file and lineage, the state dir, the instrument the plan was made under and how long
the job may run; the node loads the spec itself, checks that it is the same spec and the
same instrument (a node with another checkout of ouro must not extend anything), plans
again under the lineage's lock and runs the missing generations like a local apply.

When the job has a time limit, no generation starts unless it can end (its wall
ceiling, plus a margin, plus the scheduler's warning signal) before the limit: the job
stops at a generation boundary with ``stopped_by: "deadline"`` and the rest is
requeued or left for the next apply. A job killed outright leaves at most one
interrupted generation, which the next run recovers.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from reconciler.engine.apply import Engine, Limits, LineageResult
from reconciler.engine.events import EVENTS_FILE, EventLog
from reconciler.errors import ApplyError, OuroError
from reconciler.kernel.base.config import Identity
from reconciler.kernel.base.refusals import Reason
from reconciler.plan import Refusal

REQUEST_FORMAT = "ouro-lineage-request/v1"
RESULT_FORMAT = "ouro-lineage-result/v1"
# Seconds kept free at a job's end beyond the last generation's wall ceiling: the
# job's own start-up, the commit and the scheduler's warning signal.
END_MARGIN_SECONDS = 30


@dataclass(frozen=True)
class LineageRequest:
    """What a node needs to run one lineage (JSON-able: no live objects)."""

    name: str
    spec_file: str
    spec_sha256: str
    state_dir: str
    identity: dict[str, str]
    lock_timeout: float
    time_limit_seconds: int | None = None  # the job's, from its start
    signal_seconds: int = 0  # the scheduler warns this long before the limit

    def to_json(self) -> str:
        return json.dumps({"format": REQUEST_FORMAT, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LineageRequest:
        data = json.loads(text)
        if not isinstance(data, dict) or data.pop("format", None) != REQUEST_FORMAT:
            raise ApplyError(f"ouro: not an {REQUEST_FORMAT} request")
        try:
            return cls(**data)
        except TypeError as error:
            raise ApplyError(f"ouro: a malformed {REQUEST_FORMAT} request: {error}") from error

    def deadline_seconds(self, wall_seconds: int) -> float | None:
        """From the job's start: the last moment a generation may start, or None."""
        if self.time_limit_seconds is None:
            return None
        return self.time_limit_seconds - self.signal_seconds - END_MARGIN_SECONDS - wall_seconds


def shortest_job(wall_seconds: int, signal_seconds: int) -> int:
    """The least time limit in which a job can run one generation."""
    return wall_seconds + signal_seconds + END_MARGIN_SECONDS + 30


class _JobLog:
    """The job's own log (its stderr): one plain line per thing it did."""

    def _say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def lineage_started(self, name: str, done: int, desired: int) -> None:
        self._say(f"{name}: {done} of {desired} generations")

    def generation_started(self, name: str, number: int, desired: int) -> None:
        self._say(f"{name}: gen {number} of {desired} ...")

    def generation_finished(self, name: str, number: int, outcome: str, spend: Decimal) -> None:
        self._say(f"{name}: gen {number}: {outcome} (${spend})")

    def model_retry(self, name: str, number: int, event: dict[str, Any]) -> None:
        self._say(f"{name}: gen {number}: {event.get('http_status') or event.get('error')}, "
                  f"retry in {event.get('wait_seconds')} s ({event.get('attempt')}/"
                  f"{event.get('of')})")

    def lineage_finished(self, result: LineageResult) -> None:
        self._say(f"{result.name}: {json.dumps(result.as_json(), sort_keys=True)}")

    def note(self, message: str) -> None:
        self._say(message)

    def close(self) -> None:
        pass


def run_request(
    request: LineageRequest,
    *,
    started: float | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """Run one lineage here; the result document (never raises an OuroError). ``cancel``:
    once set, the running generation ends at once, publishing nothing."""
    from reconciler.engine.fleet import Fleet
    from reconciler.state import instrument

    started = time.monotonic() if started is None else started
    try:
        here = instrument.current()
        wanted = Identity(**request.identity)
        if here != wanted:
            raise ApplyError(
                f"ouro: this node runs instrument {here.commit[:12]} (fingerprint "
                f"{here.fingerprint[:12]}), the plan was made under {wanted.commit[:12]} "
                f"({wanted.fingerprint[:12]}): run the same ouro on the nodes as where you apply"
            )
        # the plan's instrument, the apply's state dir and kernel store
        fleet = Fleet(Path(request.state_dir), identity=wanted)
        specs = [s for s in fleet.load([Path(request.spec_file)]) if s.name == request.name]
        if not specs:
            raise ApplyError(f"ouro: {request.spec_file} no longer has lineage {request.name}")
        spec = specs[0]
        if spec.sha256 != request.spec_sha256:
            raise ApplyError(
                f"ouro: {spec.where}: the spec of {spec.name} changed after it was planned: "
                "nothing was run; apply again"
            )
    except OuroError as error:
        result = LineageResult(request.name, "refuse")
        result.errors.append(str(error))
        return result_document(result, stopped_by=None)
    offset = request.deadline_seconds(spec.ceilings().wall_seconds)
    limits = Limits(deadline=None if offset is None else started + offset)
    if cancel is not None:
        limits.cancel = cancel
    engine = Engine(
        fleet=fleet,
        limits=limits,
        reporter=_JobLog(),
        events=_events(Path(request.state_dir) / EVENTS_FILE),
        lock_timeout=request.lock_timeout,
    )
    try:
        planned = fleet.plan_one(spec)  # its kernel chosen, its provider preflighted
    except OuroError as error:
        result = LineageResult(request.name, "refuse")
        result.errors.append(str(error))
        return result_document(result, stopped_by=None)
    result = engine.run_lineage(spec, planned)
    if limits.cancel.is_set():
        result.errors.append(
            f"ouro: the job running {spec.name} was cancelled (SIGTERM: scancel, or the "
            "scheduler): its running generation was discarded; the next apply runs it"
        )
        return result_document(result, stopped_by="cancelled")
    return result_document(result, stopped_by=limits.stopped_by)


def _events(path: Path) -> EventLog:
    from reconciler.engine.executors.follow import TaggedEventLog, job_id_here

    job = job_id_here()
    return EventLog(path) if job is None else TaggedEventLog(path, job)


def result_document(result: LineageResult, *, stopped_by: str | None) -> dict[str, Any]:
    return {"format": RESULT_FORMAT, "stopped_by": stopped_by, "result": result.as_json()}


def result_from_document(document: Any, name: str) -> tuple[LineageResult, str | None]:
    """Back from JSON; a malformed document is an error of that lineage, not a crash."""
    result = LineageResult(name, "unknown")
    if not isinstance(document, dict) or document.get("format") != RESULT_FORMAT:
        result.errors.append(f"ouro: the job of {name} returned no {RESULT_FORMAT} document")
        return result, None
    data = document.get("result")
    if not isinstance(data, dict):
        result.errors.append(f"ouro: the job of {name} returned a malformed result")
        return result, None
    result.planned_action = str(data.get("planned_action", "unknown"))
    result.generations_run = int(data.get("generations_run", 0))
    result.outcomes.update({str(k): int(v) for k, v in dict(data.get("outcomes", {})).items()})
    result.spend_usd = Decimal(str(data.get("spend_usd", "0")))
    result.errors.extend(str(e) for e in data.get("errors", []))
    result.refusal = data.get("refusal")
    result.refusals = _refusals(data.get("reasons"))
    result.recovered = data.get("recovered")
    result.final_action = data.get("final_action")
    result.final_generations = data.get("observed_generations")
    result.desired_generations = int(data.get("desired_generations", 0))
    result.model_failures = int(data.get("model_failures") or 0)
    failure = data.get("last_model_failure")
    result.last_model_failure = failure if isinstance(failure, dict) else None
    stopped_lineage = data.get("stopped")
    result.stopped = stopped_lineage if isinstance(stopped_lineage, str) else None
    stopped = document.get("stopped_by")
    return result, stopped if isinstance(stopped, str) else None


def _refusals(reasons: Any) -> tuple[Refusal, ...]:
    """``as_json``'s ``reasons`` back as refusals (an unknown reason is kept as text)."""
    if not isinstance(reasons, list):
        return ()
    return tuple(
        Refusal(cast(Reason, str(item.get("reason"))), str(item.get("message", "")))
        for item in reasons if isinstance(item, dict)
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m reconciler.engine.executors.request``: a request on stdin, the result on
    stdout (for executors that run a command rather than a pickled function)."""
    del argv
    try:
        request = LineageRequest.from_json(sys.stdin.read())
    except (ValueError, OuroError) as error:
        print(f"ouro: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(run_request(request), sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
