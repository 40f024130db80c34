"""The audit's supervisor: one child per audit, stopped from either side of its start.

Rule: the O(history) audit never runs in ouro's own process. ``AuditHandle``
spawns ``python -m reconciler.state.audit_child`` in its own session (process group),
with an environment cut to an allowlist (no API keys), writes the job to its
stdin and reads ONE report from its stdout, capped in size. The report is
checked against a closed schema (``sanitize_report``); anything outside it is
dropped and the verdict becomes ``unknown``: a hostile or broken child can never
make a lineage look consistent, nor put a path or a message into our output.

Stop wins from either side of the child's start: a stop before start never
spawns; a stop while the spawn step is still running kills the child as soon as
it is published; concurrent starts launch one child. The spawn step is a
parameter, so tests race it with fakes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from reconciler.kernel.base.config import LineagePaths
from reconciler.state.audit import CODES, IDENTIFIER
from reconciler.state.audit_child import DEFAULT_MAX_FINDINGS, REPORT_SCHEMA, encode_job

__all__ = [
    "DEFAULT_TIMEOUT",
    "AuditHandle",
    "AuditItem",
    "Child",
    "Finding",
    "LineageReport",
    "SpawnFn",
    "VerifyReport",
    "child_argv",
    "child_env",
    "report_cap",
    "sanitize_report",
    "spawn_child",
    "start_background_audit",
    "verify",
]

Status = Literal["consistent", "findings", "unknown"]
Outcome = Literal["completed", "stopped", "timeout", "refused", "failed"]
STATUSES = ("consistent", "findings", "unknown")
ANCESTRY = ("linked", "parent-not-present", "broken")

DEFAULT_TIMEOUT = 600.0
# Exactly what the child needs: PATH, HOME (libgit2 reads the user's git config, e.g.
# safe.directory), the locale that decides the filesystem encoding, TMPDIR and the import
# path. No OURO_* (a spec may name its key variable OURO_...), no other LC_*.
ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "PYTHONPATH")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
_MAX_COUNT = 10**12  # no honest count or duration is larger


def report_cap(lineages: int, max_findings: int = DEFAULT_MAX_FINDINGS) -> int:
    """Bytes an honest report of this job can take (findings are ~100 bytes each)."""
    return 4096 + lineages * (1024 + 160 * max_findings)


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Finding:
    code: str
    lineage: str
    generation: int | None

    @property
    def description(self) -> str:
        return CODES.get(self.code, self.code)


@dataclass(frozen=True)
class LineageReport:
    lineage: str
    status: Status
    generations: int = 0
    observations: int = 0
    commits: int = 0
    findings_total: int = 0
    duration_ms: int = 0
    findings: tuple[Finding, ...] = ()
    exception_class: str | None = None
    resumed: int = 0  # generations a recorded clean verdict covered (0: all read)
    # a fork's link to its parent: linked | parent-not-present | broken (None: no fork)
    ancestry: str | None = None

    def as_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "lineage": self.lineage,
            "status": self.status,
            "generations": self.generations,
            "observations": self.observations,
            "commits": self.commits,
            "findings_total": self.findings_total,
            "duration_ms": self.duration_ms,
            "resumed": self.resumed,
            "ancestry": self.ancestry,
            "findings": [
                {"code": f.code, "lineage": f.lineage, "generation": f.generation}
                for f in self.findings
            ],
        }
        if self.exception_class is not None:
            record["exception_class"] = self.exception_class
        return record


@dataclass(frozen=True)
class VerifyReport:
    """The trusted verdict: only what survived the closed schema."""

    status: Status
    outcome: Outcome
    lineages: tuple[LineageReport, ...]
    duration_ms: int  # measured by the supervisor
    child_duration_ms: int | None = None
    child_cpu_ms: int | None = None
    exit_code: int | None = None
    exception_class: str | None = None

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for lineage in self.lineages for f in lineage.findings)

    @property
    def exit_status(self) -> int:
        """`ouro verify`'s exit code: 0 consistent, 1 findings or unknown."""
        return 0 if self.status == "consistent" else 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "status": self.status,
            "outcome": self.outcome,
            "duration_ms": self.duration_ms,
            "child_duration_ms": self.child_duration_ms,
            "child_cpu_ms": self.child_cpu_ms,
            "exit_code": self.exit_code,
            "exception_class": self.exception_class,
            "lineages": [lineage.as_dict() for lineage in self.lineages],
        }


# ---------------------------------------------------------------- the closed schema


class _Refused(Exception):
    """Outside the closed report schema: nothing of it is trusted."""


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_COUNT:
        raise _Refused
    return value


def _duration(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Refused
    if not math.isfinite(value) or not 0 <= value <= _MAX_COUNT:
        raise _Refused
    return int(value)


def _class_name(value: Any) -> str | None:
    """Kept only if it looks like an exception's class name; otherwise dropped."""
    return value if isinstance(value, str) and IDENTIFIER.match(value) else None


def _finding(value: Any, lineage: str) -> Finding:
    if not isinstance(value, dict):
        raise _Refused
    code, named, generation = value.get("code"), value.get("lineage"), value.get("generation")
    if not isinstance(code, str) or code not in CODES or named != lineage:
        raise _Refused
    if generation is not None and (_count(generation) < 1):
        raise _Refused
    return Finding(code, lineage, generation)


def _lineage(value: Any, expected: str, max_findings: int) -> LineageReport:
    if not isinstance(value, dict) or value.get("lineage") != expected:
        raise _Refused
    status = value.get("status")
    raw_findings = value.get("findings")
    if status not in STATUSES or not isinstance(raw_findings, list):
        raise _Refused
    findings = tuple(dict.fromkeys(_finding(f, expected) for f in raw_findings))
    total = _count(value.get("findings_total"))
    if len(findings) > max_findings or len(raw_findings) > total:
        raise _Refused
    # status and findings must tell the same story; unknown never accuses
    if (status == "findings") != (total > 0) or (status == "findings") != bool(findings):
        raise _Refused
    generations, resumed = _count(value.get("generations")), _count(value.get("resumed"))
    if resumed > generations:
        raise _Refused
    return LineageReport(
        lineage=expected,
        status=status,
        generations=generations,
        resumed=resumed,
        observations=_count(value.get("observations")),
        commits=_count(value.get("commits")),
        findings_total=total,
        duration_ms=_duration(value.get("duration_ms")),
        findings=findings,
        exception_class=_class_name(value.get("exception_class")) if status == "unknown" else None,
        ancestry=_ancestry(value.get("ancestry"), findings),
    )


def _ancestry(value: Any, findings: tuple[Finding, ...]) -> str | None:
    """A fork's verdict; "broken" only with a fork finding to back it."""
    if value is None:
        return None
    if value not in ANCESTRY or (value == "broken") != any(
            finding.code.startswith("fork-") for finding in findings):
        raise _Refused
    return str(value)


def _no_constants(constant: str) -> Any:
    raise _Refused


def sanitize_report(
    data: bytes, lineages: Sequence[str], *, max_findings: int = DEFAULT_MAX_FINDINGS
) -> dict[str, Any] | None:
    """The report if it fits the closed schema exactly (unknown keys dropped), else None.

    ``lineages``: the names the job asked about, in order; the report must
    answer exactly those. The returned dict holds only schema fields, with
    ``lineages`` as ``LineageReport`` values and the overall status recomputed.
    """
    try:
        report = json.loads(data.decode("utf-8"), parse_constant=_no_constants)
        if not isinstance(report, dict) or report.get("schema") != REPORT_SCHEMA:
            raise _Refused
        raw = report.get("lineages")
        if not isinstance(raw, list) or len(raw) != len(lineages):
            raise _Refused
        parsed = tuple(
            _lineage(value, name, max_findings) for value, name in zip(raw, lineages, strict=True)
        )
        status = _overall([lineage.status for lineage in parsed])
        if report.get("status") != status:
            raise _Refused
        return {
            "status": status,
            "lineages": parsed,
            "duration_ms": _duration(report.get("duration_ms")),
            "cpu_ms": _duration(report.get("cpu_ms")),
            "exception_class": _class_name(report.get("exception_class")),
        }
    except (_Refused, ValueError, TypeError, RecursionError):
        return None


def _overall(statuses: Sequence[str]) -> Status:
    if not statuses or "unknown" in statuses:
        return "unknown"
    return "findings" if "findings" in statuses else "consistent"


# ---------------------------------------------------------------- the child


class Child(Protocol):
    """What the supervisor needs of a spawned child (a real one, or a test's fake)."""

    stdin: IO[bytes] | None
    stdout: IO[bytes] | None

    def kill(self) -> None: ...  # the whole process group, for a real child

    def wait(self, timeout: float | None = None) -> int: ...


SpawnFn = Callable[[list[str], Mapping[str, str]], Child]


class _GroupChild:
    """A real child in its own session: kill() ends its whole process group."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.stdin = process.stdin
        self.stdout = process.stdout

    def kill(self) -> None:
        if self.process.poll() is not None:
            return  # reaped: its id may be reused, so never signal it again
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)


def spawn_child(argv: list[str], env: Mapping[str, str]) -> Child:
    """The real spawn step: own session, confined env, stderr discarded."""
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(env),
        cwd="/",
        start_new_session=True,
        close_fds=True,
    )
    return _GroupChild(process)


def child_argv() -> list[str]:
    return [sys.executable, "-m", "reconciler.state.audit_child"]


def child_env(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowlist (``ENV_ALLOWLIST``); nothing else, whatever its prefix.

    ouro's own package root is put first on PYTHONPATH, so the child imports
    the same reconciler as its parent.
    """
    source = os.environ if source is None else source
    env = {
        key: value
        for key, value in source.items()
        if key in ENV_ALLOWLIST
    }
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env.setdefault("PATH", os.defpath)
    return env


AuditItem = LineagePaths | tuple[str, LineagePaths]


def _items(items: Sequence[AuditItem]) -> list[tuple[str, LineagePaths]]:
    return [item if isinstance(item, tuple) else (item.name, item) for item in items]


@dataclass
class AuditHandle:
    """One background audit of some lineages. ``start`` once, ``result``, ``stop``."""

    items: Sequence[AuditItem]
    timeout: float = DEFAULT_TIMEOUT
    max_findings: int = DEFAULT_MAX_FINDINGS
    max_report_bytes: int | None = None
    spawn: SpawnFn = spawn_child
    env: Mapping[str, str] | None = None
    record_dir: Path | None = None  # the verdict records (state.audit_record); None: none
    full: bool = False  # read everything, whatever a record says
    parents: Mapping[str, LineagePaths] | None = None  # where forks' parents live, by name
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _launched: bool = field(default=False, init=False)
    _stopped: bool = field(default=False, init=False)
    _child: Child | None = field(default=None, init=False, repr=False)
    _report: VerifyReport | None = field(default=None, init=False, repr=False)
    _started_at: float = field(default=0.0, init=False, repr=False)
    _timed_out: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self._targets = _items(self.items)
        self._names = [name for name, _ in self._targets]
        if self.max_report_bytes is None:
            self.max_report_bytes = report_cap(len(self._targets), self.max_findings)

    # -- control ------------------------------------------------------------

    def start(self) -> AuditHandle:
        """Launch the child in the background; a second (or concurrent) start does nothing."""
        with self._lock:
            if self._launched:
                return self
            self._launched = True
            self._started_at = time.monotonic()
            if self._stopped:  # a stop before start never spawns
                self._finish_locked("stopped")
                return self
        threading.Thread(target=self._run, name="ouro-audit", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop the audit; wins whether the child exists yet or not."""
        with self._lock:
            self._stopped = True
            child = self._child
            if not self._launched:
                self._launched = True  # a later start must not spawn
                self._finish_locked("stopped")
        if child is not None:
            child.kill()

    def result(self, timeout: float | None = None) -> VerifyReport:
        """The verdict; raises ``TimeoutError`` if it is not there within ``timeout``."""
        if not self._done.wait(timeout):
            raise TimeoutError("verify: the audit has not finished yet")
        assert self._report is not None
        return self._report

    @property
    def done(self) -> bool:
        return self._done.is_set()

    # -- the worker -----------------------------------------------------------

    def _run(self) -> None:
        try:
            self._supervise()
        except BaseException as error:  # the worker reports, never raises
            self._finish("failed", exception_class=_class_name(type(error).__name__))

    def _supervise(self) -> None:
        with self._lock:
            if self._stopped:
                self._finish_locked("stopped")
                return
        try:
            child = self.spawn(child_argv(), child_env(self.env))
        except Exception as error:
            self._finish("failed", exception_class=_class_name(type(error).__name__))
            return
        with self._lock:
            self._child = child
            stopped = self._stopped
        if stopped:  # stop landed while the spawn step ran: it could not see the child
            self._reap(child)
            self._finish("stopped")
            return
        watchdog = threading.Timer(self.timeout, self._expire, args=(child,))
        watchdog.daemon = True
        watchdog.start()
        try:
            data = self._exchange(child)
        finally:
            watchdog.cancel()
        if data is None:  # oversized: refused, child killed
            self._reap(child)
            self._finish("refused")
            return
        exit_code = self._reap(child, grace=True)
        with self._lock:
            stopped, timed_out = self._stopped, self._timed_out
        if stopped:
            self._finish("stopped", exit_code=exit_code)
        elif timed_out:
            self._finish("timeout", exit_code=exit_code)
        elif exit_code != 0:
            self._finish("failed", exit_code=exit_code)
        else:
            self._accept(data, exit_code)

    def _exchange(self, child: Child) -> bytes | None:
        """Send the job, read the report up to the cap; None when it is larger."""
        assert self.max_report_bytes is not None
        job = encode_job(self._targets, max_findings=self.max_findings,
                         record_dir=self.record_dir, full=self.full, parents=self.parents)
        if child.stdin is not None:
            try:
                child.stdin.write(job)
                child.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass  # the child died or was stopped: its report (if any) decides
        if child.stdout is None:
            return b""
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = child.stdout.read(65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            size += len(chunk)
            if size > self.max_report_bytes:
                child.kill()
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def _expire(self, child: Child) -> None:
        with self._lock:
            self._timed_out = True
        child.kill()

    @staticmethod
    def _reap(child: Child, *, grace: bool = False) -> int | None:
        if not grace:
            child.kill()
        try:
            return child.wait(5.0)
        except subprocess.TimeoutExpired:
            child.kill()
            try:
                return child.wait(5.0)
            except subprocess.TimeoutExpired:
                return None

    def _accept(self, data: bytes, exit_code: int | None) -> None:
        fields = sanitize_report(data, self._names, max_findings=self.max_findings)
        if fields is None:
            self._finish("refused", exit_code=exit_code)
            return
        self._finish(
            "completed",
            lineages=fields["lineages"],
            status=fields["status"],
            exit_code=exit_code,
            child_duration_ms=fields["duration_ms"],
            child_cpu_ms=fields["cpu_ms"],
            exception_class=fields["exception_class"],
        )

    def _finish(self, outcome: Outcome, **values: Any) -> None:
        with self._lock:
            self._finish_locked(outcome, **values)

    def _finish_locked(
        self,
        outcome: Outcome,
        *,
        lineages: tuple[LineageReport, ...] | None = None,
        status: Status = "unknown",
        exit_code: int | None = None,
        child_duration_ms: int | None = None,
        child_cpu_ms: int | None = None,
        exception_class: str | None = None,
    ) -> None:
        if self._done.is_set():
            return
        if lineages is None:  # nothing trusted: every lineage is unknown, none accused
            lineages = tuple(LineageReport(name, "unknown") for name in self._names)
            status = "unknown"
        started = self._started_at or time.monotonic()
        self._report = VerifyReport(
            status=status,
            outcome=outcome,
            lineages=lineages,
            duration_ms=max(0, int((time.monotonic() - started) * 1000)),
            child_duration_ms=child_duration_ms,
            child_cpu_ms=child_cpu_ms,
            exit_code=exit_code,
            exception_class=exception_class,
        )
        self._done.set()


def start_background_audit(
    items: Sequence[AuditItem],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    spawn: SpawnFn = spawn_child,
    record_dir: Path | None = None,
    parents: Mapping[str, LineagePaths] | None = None,
) -> AuditHandle:
    """For apply: audit these lineages in a child now; ``.result(timeout)`` at the end,
    ``.stop()`` on interrupt. Never delays the caller. With ``record_dir``, each lineage's
    audit reads only what came after its last recorded clean verdict."""
    return AuditHandle(items, timeout=timeout, spawn=spawn, record_dir=record_dir,
                       parents=parents).start()


def verify(
    items: Sequence[AuditItem], *, timeout: float = DEFAULT_TIMEOUT, spawn: SpawnFn = spawn_child,
    record_dir: Path | None = None, full: bool = False,
    parents: Mapping[str, LineagePaths] | None = None,
) -> VerifyReport:
    """Audit in a child and wait for the verdict (``ouro verify``); ``full`` reads every
    object whatever the records say (and records the new verdicts); ``parents``: where
    the forks' parents live, by name (their ancestry is checked)."""
    handle = AuditHandle(items, timeout=timeout, spawn=spawn, record_dir=record_dir,
                         full=full, parents=parents).start()
    try:
        return handle.result(timeout + 30.0)
    except TimeoutError:
        handle.stop()
        return handle.result(30.0)
    except BaseException:
        handle.stop()
        raise
