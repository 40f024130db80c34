"""The Slurm executor: one job per lineage (submitit), followed until every job ends.

Planning stays where apply runs; each lineage with missing generations becomes one
job, which runs ``request.run_request`` on a node: the ordinary engine on that lineage
alone, under its lock, in the job's own time limit (a generation starts only if it can
end before the limit; the rest is requeued here, or left for the next apply). Jobs are
``submitit`` checkpointable callables, so a preempted job is requeued by Slurm and
re-plans under the lock when it starts again.

The submitting apply follows its jobs: their states (``squeue``, else ``sacct``), live
progress from the event log the jobs append to (``follow``), their results (the
submitit result pickle: the JSON result document). Ctrl-C once detaches after a short
grace (the jobs go on); twice cancels them (``scancel``): a generation cut short is
recovered by the next apply like any other.

Job folders are private: ``<state dir>/slurm-jobs`` is made 0700 (refused if others can
write it), each job is submitted under umask 077 (its folder, pickles and logs, and the
job's own files, since Slurm passes the umask on) and its folder is made 0700. A result
is unpickled only from the folder ouro made at submission (the same device and inode),
owned by this user and writable by no one else, and only from a regular file of this
user opened without following a link (``read_result``): a pickle another account
dropped anywhere else is never loaded (unpickling runs code, here with the API key in
the environment).
"""

from __future__ import annotations

import math
import os
import pickle
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any

from reconciler.engine.apply import Engine, LineageResult
from reconciler.engine.events import EVENTS_FILE
from reconciler.engine.executors.follow import JOB_FIELD, EventTail
from reconciler.engine.executors.request import (
    LineageRequest,
    run_request,
    shortest_job,
)
from reconciler.engine.lockfs import Scope, is_this_host, require_lock_scope
from reconciler.errors import ApplyError, PathRefused
from reconciler.ownfiles import check_private, open_regular, private_folder
from reconciler.plan import LineagePlan
from reconciler.spec.load import LoadedSpec
from reconciler.spec.slurm import SlurmSpec, sbatch_option
from reconciler.state.kernel_store import store_root
from reconciler.state.preflight import api_key

JOBS_DIR = "slurm-jobs"  # under the state dir: submitit's pickles and job logs
SIGNAL_SECONDS = 90  # Slurm warns a job (USR2) this long before its time limit
ACTIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
     "REQUEUE_FED", "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED",
     "PREEMPTED", "UNKNOWN"}
)
RESULT_GRACE_SECONDS = 10.0  # a job ended; its result file may lag on a shared filesystem
MAX_REQUEUES = 1000


class LineageJob:
    """What a job runs: a request in, the result document out (checkpointable)."""

    def __call__(self, request_json: str) -> dict[str, Any]:
        started = time.monotonic()
        cancel = threading.Event()

        def cancelled(signum: int, frame: FrameType | None) -> None:
            del signum, frame
            cancel.set()

        # scancel (or the end of the time limit) sends SIGTERM to every process of the job
        # at once: the running generation is cancelled, publishing nothing (submitit's own
        # handler would ignore it and let the engine go on until SIGKILL).
        signal.signal(signal.SIGTERM, cancelled)
        return run_request(LineageRequest.from_json(request_json), started=started,
                           cancel=cancel)

    def checkpoint(self, request_json: str) -> Any:
        """Preempted or timed out: Slurm requeues the same request (it re-plans)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, request_json)


@dataclass
class _Tracked:
    spec: LoadedSpec
    planned: LineagePlan
    request: LineageRequest
    job: Any = None  # submitit.slurm.slurm.SlurmJob
    state: str = "SUBMITTING"
    total: LineageResult | None = None
    requeues: int = 0
    reported_start: bool = False
    ended_at: float | None = None
    done: bool = False
    job_ids: list[str] = field(default_factory=list)
    folder: tuple[int, int] | None = None  # the job folder ouro made (device, inode)


def jobs_folder(state_dir: Path) -> Path:
    """``<state dir>/slurm-jobs``, made 0700; refused if others can write it."""
    return private_folder(state_dir / JOBS_DIR, "the Slurm job folder")


@contextmanager
def _private_umask() -> Iterator[None]:
    """submitit makes the job's folder and files; Slurm gives the job this umask too."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def made_folder(job: Any) -> tuple[int, int]:
    """Make the just-submitted job's folder 0700; its identity (device, inode), which
    ``read_result`` requires of the folder it reads from."""
    folder = Path(job.paths.folder)
    os.chmod(folder, 0o700, follow_symlinks=False)
    info = os.lstat(folder)
    return info.st_dev, info.st_ino


def _refuse(folder: Path, why: str) -> PathRefused:
    return PathRefused(f"ouro: the Slurm job folder {folder} {why}: its result was not read "
                       "(unpickling runs code); remove the folder, and keep "
                       f"{folder.parent} private (chmod 700)")


def read_result(job: Any, made: tuple[int, int] | None) -> tuple[str, Any]:
    """submitit's ``(outcome, value)`` of a job, unpickled only from the folder ouro made
    (``made``), owned by this user and writable by no one else, out of a regular file of
    this user opened without following a link; ``PathRefused`` otherwise."""
    folder, result = Path(job.paths.folder), Path(job.paths.result_pickle)
    check_private(folder.parent, "the Slurm job folder")
    info = os.lstat(folder)
    if made is None or (info.st_dev, info.st_ino) != made or not stat.S_ISDIR(info.st_mode):
        raise _refuse(folder, "is not the folder ouro made when it submitted the job")
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(folder, f"is owned by uid {info.st_uid} with mode "
                              f"{stat.S_IMODE(info.st_mode):04o} (others could write it)")
    fd = open_regular(result, os.O_RDONLY, what="the job's result file")
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(handle.fileno()).st_uid != os.geteuid():
            raise _refuse(folder, f"holds a result file {result.name} of another user")
        outcome, value = pickle.load(handle)
    return str(outcome), value


def _forget(folder: Path) -> None:
    """A job that ended with its result read leaves nothing worth keeping: its pickles
    and logs go (``<state dir>/slurm-jobs/<id>``). Best effort: a leftover costs disk only."""
    shutil.rmtree(folder, ignore_errors=True)


def slurm_parameters(spec: LoadedSpec) -> dict[str, Any]:
    """submitit's ``slurm_*`` parameters for this lineage's job (raises ApplyError)."""
    settings = spec.spec.spec.executor.slurm
    wall = spec.ceilings().wall_seconds
    if settings.time < shortest_job(wall, SIGNAL_SECONDS):
        raise ApplyError(
            f"ouro: {spec.where}: spec.executor.slurm.time {settings.time}s is too short for "
            f"one generation of {spec.name} (wall ceiling {wall}s, Slurm's {SIGNAL_SECONDS}s "
            f"warning and a margin): give at least {shortest_job(wall, SIGNAL_SECONDS)}s"
        )
    parameters: dict[str, Any] = {
        "slurm_time": math.ceil(settings.time / 60),
        "slurm_job_name": f"ouro-{spec.name}",
        "slurm_cpus_per_task": settings.cpus,
        "slurm_signal_delay_s": SIGNAL_SECONDS,
        "slurm_additional_parameters": dict(sbatch_option(item) for item in settings.sbatch),
    }
    if settings.partition:
        parameters["slurm_partition"] = settings.partition
    if settings.account:
        parameters["slurm_account"] = settings.account
    if settings.memory:
        parameters["slurm_mem"] = f"{math.ceil(settings.memory / (1 << 20))}M"
    return parameters


def _run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def job_states(ids: Sequence[str]) -> dict[str, str]:
    """Slurm's state of each job id (``squeue`` while the controller remembers it, then
    ``sacct`` where accounting is on); an id neither knows is missing from the answer."""
    if not ids:
        return {}
    states: dict[str, str] = {}
    listing = _run(["squeue", "--me", "-h", "-r", "--states=all", "-o", "%i|%T"]) or ""
    wanted = set(ids)
    for line in listing.splitlines():
        job, _, state = line.strip().partition("|")
        if job in wanted:
            states[job] = state.split()[0] if state else "UNKNOWN"
    missing = [job for job in ids if job not in states]
    if missing:
        accounting = _run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(missing)])
        for line in (accounting or "").splitlines():
            job, _, state = line.strip().partition("|")
            if job in wanted and state:
                states[job] = state.split()[0]
    return states


def partition_nodes(partition: str | None) -> set[str]:
    """The node names of a partition (None: the default partition)."""
    argv = ["sinfo", "-h", "-N", "-o", "%N"]
    if partition:
        argv += ["-p", partition]
    return set((_run(argv) or "").split())


def all_this_host(nodes: set[str]) -> bool:
    """Whether every one of these nodes is this machine: its NodeAddr (where slurmctld
    reaches its slurmd, ``scontrol show node``; else its name) is this host. A node
    called ``localhost``, or by this host's name, at 127.0.0.1 is."""
    addresses = {node: node for node in nodes}
    for line in (_run(["scontrol", "-o", "show", "node"]) or "").splitlines():
        fields = dict(item.partition("=")[::2] for item in line.split())
        if fields.get("NodeName") in addresses and fields.get("NodeAddr"):
            addresses[fields["NodeName"]] = fields["NodeAddr"]
    return all(is_this_host(address) for address in addresses.values())


def _merge(total: LineageResult | None, part: LineageResult) -> LineageResult:
    if total is None:
        return part
    total.generations_run += part.generations_run
    total.outcomes.update(part.outcomes)
    total.spend_usd += part.spend_usd
    total.errors.extend(part.errors)
    total.refusal = part.refusal or total.refusal
    total.refusals = part.refusals or total.refusals
    total.recovered = total.recovered or part.recovered
    total.model_failures += part.model_failures
    total.last_model_failure = part.last_model_failure or total.last_model_failure
    total.stopped = part.stopped or total.stopped
    return total


@dataclass
class SlurmExecutor:
    """Runs each pending lineage as one Slurm job and follows the jobs."""

    engine: Engine
    state_dir: Path
    poll_seconds: float = 1.0
    detach_grace_seconds: float = 3.0
    tracked: list[_Tracked] = field(default_factory=list)

    name = "slurm"

    def run(
        self, jobs: Sequence[tuple[LoadedSpec, LineagePlan]], parallel: int
    ) -> list[LineageResult]:
        del parallel  # the cluster's scheduler decides how many jobs run at once
        runnable = [(spec, planned) for spec, planned in jobs if planned.pending]
        # A lineage refused at plan time is only confirmed under its lock: that needs no job.
        results = self.engine.run([job for job in jobs if not job[1].pending], 1)
        if not runnable:
            return results
        self._check_cluster(runnable)
        tail = EventTail(self.state_dir / EVENTS_FILE)
        for spec, planned in runnable:
            self.tracked.append(self._submit(spec, planned))
        self._follow(tail)
        for item in self.tracked:
            total = item.total or LineageResult(item.spec.name, item.planned.action)
            total.desired_generations = item.spec.spec.spec.generations
            results.append(self.engine._finish(item.spec, total))
        return results

    # --- submission --------------------------------------------------------------

    def _check_cluster(self, runnable: Sequence[tuple[LoadedSpec, LineagePlan]]) -> None:
        if shutil.which("sbatch") is None:
            raise ApplyError(
                "ouro apply --executor slurm: sbatch is not on PATH: run apply on a Slurm "
                "login node (or install slurm-wlm's client and its slurm.conf)"
            )
        nodes: set[str] = set()
        for partition in {spec.spec.spec.executor.slurm.partition for spec, _ in runnable}:
            found = partition_nodes(partition)
            if not found:
                where = next(s.where for s, _ in runnable
                             if s.spec.spec.executor.slurm.partition == partition)
                raise ApplyError(
                    f"ouro: {where}: spec.executor.slurm.partition "
                    f"{partition or '(the default)'}: the cluster has no such partition, or "
                    "it has no nodes (`sinfo -s` lists them): nothing was submitted"
                )
            nodes |= found
        needed: Scope = "host" if nodes and all_this_host(nodes) else "cluster"
        for spec, _ in runnable:
            require_lock_scope(
                spec.paths().git_dir.parent, needed, what=f"lineage {spec.name} ({spec.where})"
            )
        require_lock_scope(self.state_dir, needed, what=f"the state dir {self.state_dir}")
        store = store_root(self.state_dir)
        require_lock_scope(store, needed, what=f"the kernel store {store}")
        try:
            jobs_folder(self.state_dir)
        except OSError as error:
            raise ApplyError(f"ouro: cannot make the Slurm job folder {self.state_dir / JOBS_DIR}"
                             f" ({error.strerror}): check the state dir's permissions") from error

    def _request(self, spec: LoadedSpec) -> LineageRequest:
        identity = self.engine.identity
        return LineageRequest(
            name=spec.name,
            spec_file=str(spec.file.resolve()),
            spec_sha256=spec.sha256,
            state_dir=str(self.state_dir),
            identity={
                "repository": identity.repository,
                "ref": identity.ref,
                "commit": identity.commit,
                "fingerprint": identity.fingerprint,
            },
            lock_timeout=self.engine.lock_timeout,
            time_limit_seconds=spec.spec.spec.executor.slurm.time,
            signal_seconds=SIGNAL_SECONDS,
        )

    def _submit(self, spec: LoadedSpec, planned: LineagePlan) -> _Tracked:
        item = _Tracked(spec, planned, self._request(spec))
        probed = LineageResult(spec.name, planned.action)
        if self.engine.probe_refuses(spec, api_key(spec.model()), probed):
            item.total, item.done = probed, True  # a wrong key costs no job and creates nothing
            return item
        try:
            item.job, item.folder = self._sbatch(spec, item.request)
        except ApplyError as error:
            item.total = LineageResult(spec.name, planned.action)
            item.total.errors.append(str(error))
            item.done = True
            self.engine.events.emit("error", lineage=spec.name, error=str(error), kind="submit")
            return item
        item.state = "PENDING"
        item.job_ids.append(item.job.job_id)
        self.engine.events.emit(
            "job-submitted", lineage=spec.name, executor="slurm", **{JOB_FIELD: item.job.job_id}
        )
        self.engine.reporter.note(f"{spec.name}: Slurm job {item.job.job_id} submitted")
        return item

    def _sbatch(self, spec: LoadedSpec, request: LineageRequest) -> tuple[Any, tuple[int, int]]:
        """The submitted job and its folder's identity (``made_folder``)."""
        import submitit

        parameters = slurm_parameters(spec)
        try:
            folder = jobs_folder(self.state_dir) / "%j"
            executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=MAX_REQUEUES)
            executor.update_parameters(**{k.removeprefix("slurm_"): v for k, v in
                                          parameters.items()})
            with _private_umask():
                job = executor.submit(LineageJob(), request.to_json())
            return job, made_folder(job)
        except subprocess.CalledProcessError as error:
            output = (error.output or b"").decode("utf-8", "replace").strip()
            raise ApplyError(
                f"ouro: {spec.where}: sbatch refused the job of {spec.name}: "
                f"{output or error}; check spec.executor.slurm"
            ) from error
        except (OSError, RuntimeError, ValueError) as error:
            raise ApplyError(
                f"ouro: {spec.where}: sbatch refused the job of {spec.name}: "
                f"{str(error).strip()}; check spec.executor.slurm"
            ) from error

    # --- following ---------------------------------------------------------------

    def _follow(self, tail: EventTail) -> None:
        limits = self.engine.limits
        detach_at: float | None = None
        cancelled = False
        while not all(item.done for item in self.tracked):
            if limits.cancel.is_set() and not cancelled:
                cancelled = True
                self._cancel_all()
            if limits.stop.is_set() and detach_at is None and not cancelled:
                detach_at = time.monotonic() + self.detach_grace_seconds
                self.engine.reporter.note(
                    "ouro: detaching from the Slurm jobs, which go on (Ctrl-C again within "
                    f"{self.detach_grace_seconds:g}s to cancel them instead)"
                )
            if detach_at is not None and not cancelled and time.monotonic() >= detach_at:
                self._detach()
                return
            self._replay(tail)
            self._poll(requeue=not limits.stop.is_set())
            if not all(item.done for item in self.tracked):
                limits.cancel.wait(self.poll_seconds)
        if cancelled:
            self._settle()
        self._replay(tail)

    def _settle(self, timeout: float = 90.0) -> None:
        """After scancel: wait until no process of the cancelled jobs is left (COMPLETING),
        so that this apply ends after them, their locks free."""
        ids = [job for item in self.tracked for job in item.job_ids]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = job_states(ids)
            if not any(state in ACTIVE_STATES for state in states.values()):
                return
            time.sleep(self.poll_seconds / 2)
        self.engine.reporter.note(
            f"ouro: Slurm jobs {', '.join(ids)} were still ending after {timeout:g}s"
        )

    def _replay(self, tail: EventTail) -> None:
        by_job = {
            item.job.job_id: item for item in self.tracked if item.job is not None
        }
        reporter = self.engine.reporter
        for record in tail.records():
            item = by_job.get(str(record.get(JOB_FIELD)))
            if item is None:
                continue
            number = record.get("generation")
            desired = item.planned.desired_generations
            if record.get("event") == "generation-started" and isinstance(number, int):
                self._started(item)
                reporter.generation_started(item.spec.name, number, desired)
            elif record.get("event") == "generation" and isinstance(number, int):
                self._started(item)
                reporter.generation_finished(
                    item.spec.name,
                    number,
                    str(record.get("outcome") or record.get("status")),
                    Decimal(str(record.get("spend_usd", "0"))),
                )
            elif record.get("event") == "recovered":
                reporter.note(f"{item.spec.name}: recovered ({record.get('report')})")

    def _started(self, item: _Tracked) -> None:
        if not item.reported_start:
            item.reported_start = True
            self.engine.reporter.lineage_started(
                item.spec.name, item.planned.observed_generations, item.planned.desired_generations
            )

    def _poll(self, *, requeue: bool) -> None:
        live = [item for item in self.tracked if not item.done]
        states = job_states([item.job.job_id for item in live])
        for item in live:
            state = states.get(item.job.job_id, item.state)
            if state != item.state:
                item.state = state
                self.engine.reporter.note(f"{item.spec.name}: job {item.job.job_id} {state}")
                if state == "RUNNING":
                    self._started(item)
            if item.job.paths.result_pickle.exists():
                self._collect(item, requeue=requeue)
            elif state not in ACTIVE_STATES or item.job.job_id not in states:
                item.ended_at = item.ended_at or time.monotonic()
                grace = 0.0 if self.engine.limits.cancel.is_set() else RESULT_GRACE_SECONDS
                if time.monotonic() - item.ended_at >= grace:
                    self._lost(item, state)

    def _collect(self, item: _Tracked, *, requeue: bool) -> None:
        from reconciler.engine.executors.request import result_from_document

        name = item.spec.name
        try:
            outcome, value = read_result(item.job, item.folder)
        except PathRefused as error:
            outcome, value = "error", str(error)
        except (OSError, ValueError, EOFError, TypeError, pickle.UnpicklingError) as error:
            outcome, value = "error", f"unreadable result file: {error}"
        if outcome != "success":
            part = LineageResult(name, item.planned.action)
            lines = str(value).strip().splitlines()
            part.errors.append(
                f"ouro: the job {item.job.job_id} of {name} failed: "
                f"{lines[-1] if lines else 'no reason given'} (log: {item.job.paths.stderr})"
            )
            stopped_by = None
        else:
            part, stopped_by = result_from_document(value, name)
            _forget(item.job.paths.folder)  # a failed job's folder stays: its log is named
        item.total = _merge(item.total, part)
        self.engine.events.emit(
            "job-ended", lineage=name, state=item.state, stopped_by=stopped_by,
            **{JOB_FIELD: item.job.job_id},
        )
        if requeue and stopped_by == "deadline" and self._resubmit(item, part):
            return
        item.done = True

    def _resubmit(self, item: _Tracked, part: LineageResult) -> bool:
        """The job reached its time limit with generations left: a new job for the rest."""
        if part.generations_run == 0:
            item.total = _merge(item.total, LineageResult(item.spec.name, item.planned.action))
            assert item.total is not None
            item.total.errors.append(
                f"ouro: the job of {item.spec.name} could start no generation in its time "
                f"limit ({item.request.time_limit_seconds}s): raise spec.executor.slurm.time "
                f"({item.spec.where})"
            )
            return False
        if item.requeues >= MAX_REQUEUES:
            return False
        try:
            job, made = self._sbatch(item.spec, item.request)
        except ApplyError as error:
            assert item.total is not None
            item.total.errors.append(str(error))
            return False
        item.requeues += 1
        item.job, item.folder, item.state, item.ended_at = job, made, "PENDING", None
        item.job_ids.append(job.job_id)
        self.engine.events.emit(
            "job-requeued", lineage=item.spec.name, reason="time-limit",
            **{JOB_FIELD: job.job_id},
        )
        self.engine.reporter.note(
            f"{item.spec.name}: time limit reached at a generation boundary; job {job.job_id} "
            "continues it"
        )
        return True

    def _lost(self, item: _Tracked, state: str) -> None:
        part = LineageResult(item.spec.name, item.planned.action)
        if state in ("CANCELLED", "UNKNOWN") and self.engine.limits.cancel.is_set():
            message = "cancelled"
        else:
            message = f"ended {state} without a result (log: {item.job.paths.stderr})"
        part.errors.append(
            f"ouro: the job {item.job.job_id} of {item.spec.name} {message}; the next apply "
            "recovers a generation it cut short"
        )
        item.total = _merge(item.total, part)
        item.done = True
        self.engine.events.emit(
            "job-ended", lineage=item.spec.name, state=state, **{JOB_FIELD: item.job.job_id}
        )

    def _cancel_all(self) -> None:
        live = [item for item in self.tracked if not item.done and item.job is not None]
        ids = [item.job.job_id for item in live]
        if ids:
            _run(["scancel", *ids])
            self.engine.reporter.note(f"ouro: cancelled Slurm jobs {', '.join(ids)}")
            for item in live:
                self.engine.events.emit(
                    "job-cancelled", lineage=item.spec.name, **{JOB_FIELD: item.job.job_id}
                )

    def _detach(self) -> None:
        for item in self.tracked:
            if item.done:
                continue
            item.done = True
            self.engine.reporter.note(
                f"{item.spec.name}: job {item.job.job_id} goes on without this apply "
                f"(squeue -j {item.job.job_id}); apply again afterwards to see it in sync"
            )
            self.engine.events.emit(
                "job-detached", lineage=item.spec.name, **{JOB_FIELD: item.job.job_id}
            )


class DoctorJob:
    """What ``ouro doctor --executor slurm`` runs on a node: every check, as plain data."""

    def __call__(self) -> dict[str, Any]:
        from dataclasses import asdict

        from reconciler.engine.doctor import run_checks

        return {"node": socket.gethostname(), "checks": [asdict(c) for c in run_checks()]}


def doctor_in_job(state_dir: Path, settings: SlurmSpec, *, timeout: float = 600) -> Any:
    """Run the doctor's checks (one real life included) in a job; (job id, node, checks)."""
    import submitit

    from reconciler.engine.doctor import Check

    if shutil.which("sbatch") is None:
        raise ApplyError("ouro doctor --executor slurm: sbatch is not on PATH: run it on a "
                         "Slurm login node")
    parameters: dict[str, Any] = {"time": 10, "job_name": "ouro-doctor",
                                  "cpus_per_task": settings.cpus}
    if settings.partition:
        parameters["partition"] = settings.partition
    if settings.account:
        parameters["account"] = settings.account
    parameters["additional_parameters"] = dict(sbatch_option(o) for o in settings.sbatch)
    try:
        executor = submitit.SlurmExecutor(folder=jobs_folder(state_dir) / "%j")
        executor.update_parameters(**parameters)
        with _private_umask():
            job = executor.submit(DoctorJob())
        made = made_folder(job)
    except (subprocess.CalledProcessError, OSError, RuntimeError, ValueError) as error:
        detail = getattr(error, "output", b"") or b""
        text = detail.decode("utf-8", "replace").strip() if isinstance(detail, bytes) else ""
        raise ApplyError(f"ouro doctor: sbatch refused the probe job: {text or error}") from error
    deadline = time.monotonic() + timeout
    ended_at: float | None = None
    while not job.paths.result_pickle.exists():
        state = job_states([job.job_id]).get(job.job_id, "UNKNOWN")
        if state not in ACTIVE_STATES:
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at > RESULT_GRACE_SECONDS:
                raise ApplyError(f"ouro doctor: the probe job {job.job_id} ended {state} "
                                 f"without a result (log: {job.paths.stderr})")
        if time.monotonic() > deadline:
            _run(["scancel", job.job_id])
            raise ApplyError(f"ouro doctor: the probe job {job.job_id} did not end within "
                             f"{timeout:g}s (state {state}); cancelled it")
        time.sleep(0.5)
    try:
        outcome, value = read_result(job, made)
    except (OSError, ValueError, EOFError, TypeError, pickle.UnpicklingError) as error:
        outcome, value = "error", f"unreadable result file: {error}"
    if outcome != "success" or not isinstance(value, dict):
        lines = str(value).strip().splitlines()
        raise ApplyError(f"ouro doctor: the probe job {job.job_id} failed: "
                         f"{lines[-1] if lines else '?'} (log: {job.paths.stderr})")
    checks = [Check(**item) for item in value["checks"]]
    _forget(job.paths.folder)
    return job.job_id, str(value["node"]), checks


__all__ = [
    "JOBS_DIR",
    "SIGNAL_SECONDS",
    "DoctorJob",
    "LineageJob",
    "SlurmExecutor",
    "doctor_in_job",
    "job_states",
    "jobs_folder",
    "made_folder",
    "read_result",
    "slurm_parameters",
]
