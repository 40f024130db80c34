"""The supervisor with fakes of the spawn step: stop races, caps, the closed report schema."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine.verify import (
    AuditHandle,
    Child,
    child_env,
    report_cap,
    sanitize_report,
    start_background_audit,
)
from reconciler.kernel.base.config import LineagePaths
from reconciler.state.audit_child import REPORT_SCHEMA

GATE = 30.0
PATHS = LineagePaths(
    Path("/nowhere/a"),
    Path("/nowhere/a.git"),
    Path("/nowhere/a.observations"),
    "lineage-a",
    "observations/lineage-a",
    name="a",
)
NAMES = ["a"]


def lineage_record(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "lineage": "a",
        "status": "findings",
        "generations": 3,
        "observations": 3,
        "commits": 4,
        "findings_total": 1,
        "duration_ms": 2,
        "resumed": 0,
        "findings": [{"code": "overspend", "lineage": "a", "generation": 2}],
    }
    record.update(changes)
    return record


def report(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "status": "findings",
        "duration_ms": 3,
        "cpu_ms": 2,
        "lineages": [lineage_record()],
    }
    document.update(changes)
    return document


def encoded(document: Any) -> bytes:
    return json.dumps(document).encode()


class BlockingReader(io.RawIOBase):
    """A stdout that blocks until the child is killed (or released)."""

    def __init__(self, payload: bytes = b"") -> None:
        self.release = threading.Event()
        self.reading = threading.Event()
        self.payload = payload

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.reading.set()
        assert self.release.wait(GATE)
        payload, self.payload = self.payload, b""
        return payload


class FakeChild:
    def __init__(
        self, payload: bytes = b"", *, exit_code: int = 0, stdout: io.RawIOBase | None = None
    ) -> None:
        self.stdin = io.BytesIO()
        self.stdin.close = lambda: None  # type: ignore[method-assign]  # keep what was written
        self.stdout: Any = stdout if stdout is not None else io.BytesIO(payload)
        self.killed = threading.Event()
        self.exit_code = exit_code

    def kill(self) -> None:
        self.killed.set()
        if isinstance(self.stdout, BlockingReader):
            self.stdout.release.set()

    def wait(self, timeout: float | None = None) -> int:
        return -9 if self.killed.is_set() else self.exit_code


class Spawner:
    """A fake spawn step: records calls, optionally blocks inside 'Popen'."""

    def __init__(
        self,
        child: FakeChild | None = None,
        *,
        gate: threading.Event | None = None,
        error: Exception | None = None,
    ) -> None:
        self.child = child or FakeChild(encoded(report()))
        self.gate = gate
        self.error = error
        self.calls: list[tuple[list[str], Mapping[str, str]]] = []
        self.entered = threading.Event()

    def __call__(self, argv: list[str], env: Mapping[str, str]) -> Child:
        self.calls.append((argv, env))
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(GATE)
        if self.error is not None:
            raise self.error
        child: Child = self.child  # type: ignore[assignment]  # BytesIO stands in for IO[bytes]
        return child


# ------------------------------------------------------------------ stop races


def test_stop_before_start_never_spawns() -> None:
    spawn = Spawner()
    handle = AuditHandle([PATHS], spawn=spawn)
    handle.stop()
    handle.start()
    result = handle.result(GATE)
    assert spawn.calls == []
    assert (result.status, result.outcome) == ("unknown", "stopped")
    assert [lineage.status for lineage in result.lineages] == ["unknown"]


def test_stop_while_the_spawn_step_runs_kills_the_child_once_it_appears() -> None:
    gate = threading.Event()
    spawn = Spawner(FakeChild(stdout=BlockingReader(encoded(report()))), gate=gate)
    handle = AuditHandle([PATHS], spawn=spawn).start()
    assert spawn.entered.wait(GATE)  # the worker is inside the spawn step: no child yet
    handle.stop()  # cannot see a child: must latch
    assert not spawn.child.killed.is_set()
    gate.set()  # the spawn returns and publishes the child
    assert spawn.child.killed.wait(GATE), "the child was not killed after it appeared"
    result = handle.result(GATE)
    assert (result.status, result.outcome) == ("unknown", "stopped")
    assert spawn.child.stdin.getvalue() == b"", "a stopped child must not even get its job"


def test_stop_after_the_child_appeared_kills_it() -> None:
    reader = BlockingReader(encoded(report()))
    spawn = Spawner(FakeChild(stdout=reader))
    handle = AuditHandle([PATHS], spawn=spawn).start()
    assert reader.reading.wait(GATE)
    handle.stop()
    assert spawn.child.killed.is_set()
    result = handle.result(GATE)
    assert (result.status, result.outcome) == ("unknown", "stopped")
    assert result.findings == (), "a stopped audit accuses nobody, even if a report arrived"


def test_concurrent_starts_launch_one_child() -> None:
    spawn = Spawner()
    handle = AuditHandle([PATHS], spawn=spawn)
    ready = threading.Barrier(8)

    def start() -> None:
        ready.wait(GATE)
        handle.start()

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GATE)
    assert handle.result(GATE).outcome == "completed"
    assert len(spawn.calls) == 1


def test_a_second_start_after_the_end_does_not_spawn_again() -> None:
    spawn = Spawner()
    handle = AuditHandle([PATHS], spawn=spawn).start()
    handle.result(GATE)
    handle.start()
    time.sleep(0.05)
    assert len(spawn.calls) == 1


def test_stop_after_the_verdict_changes_nothing() -> None:
    handle = AuditHandle([PATHS], spawn=Spawner()).start()
    first = handle.result(GATE)
    handle.stop()
    assert handle.result(0) is first and first.outcome == "completed"


def test_result_raises_timeout_while_the_audit_runs() -> None:
    reader = BlockingReader()
    handle = AuditHandle([PATHS], spawn=Spawner(FakeChild(stdout=reader))).start()
    assert reader.reading.wait(GATE)
    with pytest.raises(TimeoutError):
        handle.result(0.05)
    handle.stop()
    assert handle.result(GATE).outcome == "stopped"


# ------------------------------------------------------------------ what the child is given


def test_the_job_names_the_lineages_and_the_child_runs_the_audit_module() -> None:
    spawn = Spawner()
    handle = start_background_audit([("a", PATHS)], spawn=spawn)
    assert handle.result(GATE).outcome == "completed"
    argv, _ = spawn.calls[0]
    assert argv[1:] == ["-m", "reconciler.state.audit_child"]
    job = json.loads(spawn.child.stdin.getvalue())
    assert [entry["name"] for entry in job["lineages"]] == ["a"]
    assert job["lineages"][0]["git_dir"] == "/nowhere/a.git"


def test_child_env_is_an_allowlist() -> None:
    source = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "LC_CTYPE": "C",
        "TMPDIR": "/tmp",
        "OURO_STATE_DIR": "/s",
        "OURO_INSTRUMENT_COMMIT": "5" * 40,
        "PYTHONPATH": "/extra",
        "OPENAI_API_KEY": "sk-secret",
        "ANTHROPIC_API_KEY": "secret",
        "AWS_SECRET_ACCESS_KEY": "x",
        "PYTHONSTARTUP": "/evil.py",
        "LD_PRELOAD": "/evil.so",
        "OUROBOROS_API_KEY": "x",
        "SSH_AUTH_SOCK": "/sock",
        "GIT_DIR": "/elsewhere",
        "OURO_ANTHROPIC_KEY": "sk-a-spec-may-name-its-key-so",
        "LC_MONETARY": "x",
        "OURO_DEBUG": "1",
    }
    env = child_env(source)
    assert set(env) == {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TMPDIR",
        "PYTHONPATH",
    }
    assert env["PYTHONPATH"].endswith(":/extra")
    assert "secret" not in json.dumps(env)


# ------------------------------------------------------------------ how the child ends


def test_a_valid_report_is_trusted() -> None:
    result = AuditHandle([PATHS], spawn=Spawner()).start().result(GATE)
    assert (result.status, result.outcome, result.exit_code) == ("findings", "completed", 0)
    assert [(f.code, f.lineage, f.generation) for f in result.findings] == [("overspend", "a", 2)]
    assert result.exit_status == 1
    assert (result.child_duration_ms, result.child_cpu_ms) == (3, 2)


def test_an_oversized_report_is_refused_and_the_child_killed() -> None:
    cap = report_cap(1)
    child = FakeChild(b" " * (cap + 1))
    result = AuditHandle([PATHS], spawn=Spawner(child)).start().result(GATE)
    assert (result.status, result.outcome) == ("unknown", "refused")
    assert child.killed.is_set()


def test_an_explicit_cap_is_honoured() -> None:
    child = FakeChild(encoded(report()))
    handle = AuditHandle([PATHS], spawn=Spawner(child), max_report_bytes=64)
    assert handle.start().result(GATE).outcome == "refused"
    assert child.killed.is_set()


def test_a_report_exactly_at_the_cap_is_read() -> None:
    payload = encoded(report())
    handle = AuditHandle([PATHS], spawn=Spawner(FakeChild(payload)), max_report_bytes=len(payload))
    assert handle.start().result(GATE).outcome == "completed"


def test_a_silent_child_times_out_and_is_killed() -> None:
    reader = BlockingReader()
    child = FakeChild(stdout=reader)
    result = AuditHandle([PATHS], spawn=Spawner(child), timeout=0.2).start().result(GATE)
    assert (result.status, result.outcome) == ("unknown", "timeout")
    assert child.killed.is_set()


def test_a_failing_child_is_not_trusted_even_with_a_report() -> None:
    child = FakeChild(
        encoded(
            report(
                status="consistent",
                lineages=[lineage_record(status="consistent", findings_total=0, findings=[])],
            )
        ),
        exit_code=1,
    )
    result = AuditHandle([PATHS], spawn=Spawner(child)).start().result(GATE)
    assert (result.status, result.outcome, result.exit_code) == ("unknown", "failed", 1)


def test_a_spawn_failure_records_only_the_exception_class() -> None:
    spawn = Spawner(error=PermissionError("/secret/path/to/python"))
    result = AuditHandle([PATHS], spawn=spawn).start().result(GATE)
    assert (result.status, result.outcome) == ("unknown", "failed")
    assert result.exception_class == "PermissionError"
    assert "/secret" not in json.dumps(result.as_dict())


def test_a_hostile_report_never_reaches_the_output() -> None:
    hostile = report(
        path="/secret/top",
        exception_class="/etc/passwd not found",
        lineages=[
            lineage_record(
                note="/secret/lineage",
                findings=[
                    {
                        "code": "overspend",
                        "lineage": "a",
                        "generation": 2,
                        "message": "/secret/finding",
                    }
                ],
            )
        ],
    )
    result = AuditHandle([PATHS], spawn=Spawner(FakeChild(encoded(hostile)))).start().result(GATE)
    assert result.outcome == "completed"
    assert "secret" not in json.dumps(result.as_dict())


# ------------------------------------------------------------------ the closed schema, table-driven


def _lineage(**changes: Any) -> dict[str, Any]:
    return report(lineages=[lineage_record(**changes)])


def _finding(**changes: Any) -> dict[str, Any]:
    finding = {"code": "overspend", "lineage": "a", "generation": 2, **changes}
    return report(lineages=[lineage_record(findings=[finding])])


REFUSED: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("not-json", b"not json"),
    ("not-utf8", b"\xff\xfe{}"),
    ("array", b"[]"),
    ("string", b'"consistent"'),
    ("truncated", encoded(report())[:-5]),
    ("wrong-schema", encoded(report(schema="ouro-verify-report/v0"))),
    ("no-schema", encoded({k: v for k, v in report().items() if k != "schema"})),
    ("status-weird", encoded(report(status="fine"))),
    ("status-disagrees", encoded(report(status="consistent"))),
    ("lineages-not-list", encoded(report(lineages={"a": 1}))),
    ("lineage-missing", encoded(report(lineages=[]))),
    ("lineage-extra", encoded(report(lineages=[lineage_record(), lineage_record()]))),
    ("lineage-renamed", encoded(_lineage(lineage="b"))),
    ("lineage-status-weird", encoded(_lineage(status="guilty"))),
    ("count-negative", encoded(_lineage(generations=-1))),
    ("count-bool", encoded(_lineage(observations=True))),
    ("count-float", encoded(_lineage(commits=1.5))),
    ("count-string", encoded(_lineage(generations="3"))),
    ("count-huge", encoded(_lineage(generations=10**15))),
    ("resumed-beyond-generations", encoded(_lineage(resumed=4))),
    ("resumed-negative", encoded(_lineage(resumed=-1))),
    ("resumed-bool", encoded(_lineage(resumed=True))),
    ("resumed-missing", encoded(report(lineages=[
        {k: v for k, v in lineage_record().items() if k != "resumed"}]))),
    ("duration-negative", encoded(report(duration_ms=-1))),
    (
        "duration-infinity",
        encoded(report(duration_ms=1)).replace(b'"duration_ms": 1', b'"duration_ms": Infinity'),
    ),
    ("duration-nan", encoded(report(cpu_ms=1)).replace(b'"cpu_ms": 1', b'"cpu_ms": NaN')),
    ("duration-missing", encoded({k: v for k, v in report().items() if k != "cpu_ms"})),
    ("duration-string", encoded(_lineage(duration_ms="2"))),
    ("findings-not-list", encoded(_lineage(findings="overspend"))),
    ("finding-not-object", encoded(_lineage(findings=["overspend"]))),
    ("finding-unknown-code", encoded(_finding(code="guilty"))),
    ("finding-code-number", encoded(_finding(code=7))),
    ("finding-other-lineage", encoded(_finding(lineage="b"))),
    ("finding-generation-zero", encoded(_finding(generation=0))),
    ("finding-generation-negative", encoded(_finding(generation=-2))),
    ("finding-generation-float", encoded(_finding(generation=2.0))),
    ("finding-generation-string", encoded(_finding(generation="2"))),
    ("findings-status-without-findings", encoded(_lineage(findings=[], findings_total=0))),
    (
        "consistent-with-findings",
        encoded(report(status="consistent", lineages=[lineage_record(status="consistent")])),
    ),
    (
        "unknown-with-findings",
        encoded(report(status="unknown", lineages=[lineage_record(status="unknown")])),
    ),
    ("total-below-listed", encoded(_lineage(findings_total=0))),
    (
        "too-many-findings",
        encoded(
            _lineage(
                findings_total=500,
                findings=[
                    {"code": "overspend", "lineage": "a", "generation": n} for n in range(1, 200)
                ],
            )
        ),
    ),
    ("deeply-nested", b"[" * 100000 + b"]" * 100000),
]


@pytest.mark.parametrize(
    "payload", [case[1] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
def test_anything_outside_the_closed_schema_is_refused(payload: bytes) -> None:
    assert sanitize_report(payload, NAMES) is None


@pytest.mark.parametrize(
    "payload", [case[1] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
def test_a_refused_report_makes_every_lineage_unknown(payload: bytes) -> None:
    result = AuditHandle([PATHS], spawn=Spawner(FakeChild(payload))).start().result(GATE)
    assert (result.status, result.outcome) == ("unknown", "refused")
    assert result.findings == ()
    assert result.exit_status == 1


def test_extra_keys_are_dropped_and_exception_classes_clamped() -> None:
    fields = sanitize_report(
        encoded(
            report(
                note="x",
                exception_class="ValueError",
                lineages=[
                    lineage_record(
                        extra=1,
                        findings=[
                            {
                                "code": "overspend",
                                "lineage": "a",
                                "generation": 2,
                                "path": "/secret",
                            }
                        ],
                    )
                ],
            )
        ),
        NAMES,
    )
    assert fields is not None
    assert set(fields) == {"status", "lineages", "duration_ms", "cpu_ms", "exception_class"}
    assert fields["exception_class"] == "ValueError"
    assert "secret" not in repr(fields)
    hostile = sanitize_report(encoded(report(exception_class="/etc/passwd not found")), NAMES)
    assert hostile is not None and hostile["exception_class"] is None


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("GitError", "GitError"),
        ("HistoryUnreadable", "HistoryUnreadable"),
        ("No such file: /x", None),
        ("a" * 65, None),
        ("1Error", None),
        ("", None),
        (7, None),
    ],
    ids=["class", "ours", "message", "too-long", "digit-first", "empty", "number"],
)
def test_only_identifier_like_exception_classes_survive(value: object, kept: str | None) -> None:
    document = report(
        status="unknown",
        lineages=[
            lineage_record(status="unknown", findings=[], findings_total=0, exception_class=value)
        ],
    )
    fields = sanitize_report(encoded(document), NAMES)
    assert fields is not None
    assert fields["lineages"][0].exception_class == kept


def test_duplicate_findings_collapse() -> None:
    finding = {"code": "overspend", "lineage": "a", "generation": 2}
    fields = sanitize_report(
        encoded(_lineage(findings=[finding, finding], findings_total=2)), NAMES
    )
    assert fields is not None and len(fields["lineages"][0].findings) == 1
