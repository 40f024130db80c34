"""The real child: its own interpreter and process group, a cut-down env, one report."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from reconciler.engine.verify import (
    AuditHandle,
    Child,
    child_env,
    sanitize_report,
    spawn_child,
    verify,
)
from reconciler.kernel.base.config import LineagePaths
from reconciler.state import audit_child
from tests.verify.builder import Lineage
from tests.verify.test_audit import fixture_paths, overspend, sound

GATE = 60.0


def _wrapped(snippet: str) -> list[str]:
    """Run ``snippet`` in the child first, then the real audit child (same process)."""
    return [
        sys.executable,
        "-c",
        snippet + "\nimport runpy; "
        "runpy.run_module('reconciler.state.audit_child', run_name='__main__')",
    ]


class Recorder:
    def __init__(self, argv: list[str] | None = None) -> None:
        self.argv = argv
        self.children: list[Child] = []

    def __call__(self, argv: list[str], env: Mapping[str, str]) -> Child:
        child = spawn_child(self.argv or argv, env)
        self.children.append(child)
        return child


def test_the_real_child_audits_in_its_own_interpreter(
    tmp_path: Path, original_lineage: Path
) -> None:
    damaged = sound(tmp_path / "lineages", "damaged")
    overspend(damaged)
    result = verify([("fixture", fixture_paths(original_lineage)), ("damaged", damaged.paths)])
    assert (result.outcome, result.exit_code) == ("completed", 0)
    assert [(x.lineage, x.status) for x in result.lineages] == [
        ("fixture", "consistent"),
        ("damaged", "findings"),
    ]
    assert [(f.code, f.generation) for f in result.findings] == [("overspend", 5)]
    assert result.child_duration_ms is not None and result.child_cpu_ms is not None


def test_an_unreadable_lineage_is_unknown_through_the_child(tmp_path: Path) -> None:
    paths = LineagePaths(
        tmp_path / "x",
        tmp_path / "x.git",
        tmp_path / "x.observations",
        "lineage-x",
        "observations/lineage-x",
    )
    result = verify([paths])
    assert (result.status, result.outcome) == ("unknown", "completed")
    assert result.lineages[0].exception_class == "HistoryUnreadable"
    assert result.findings == ()
    assert str(tmp_path) not in json.dumps(result.as_dict())


def test_a_secret_in_the_parent_env_is_not_visible_to_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "very-secret-too")
    monkeypatch.setenv("OURO_OPENAI_KEY", "sk-named-by-a-spec")  # a spec's api_key_env
    monkeypatch.setenv("LC_TELEPHONE", "leaked")
    seen = tmp_path / "env.json"
    lineage = sound(tmp_path / "lineages")
    spawn = Recorder(
        _wrapped(f"import json, os; open({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))")
    )
    result = AuditHandle([lineage.paths], spawn=spawn).start().result(GATE)
    assert (result.status, result.outcome) == ("consistent", "completed")
    env = json.loads(seen.read_text())
    assert "sk-very-secret" not in json.dumps(env) and "very-secret-too" not in json.dumps(env)
    assert "sk-named-by-a-spec" not in json.dumps(env)
    assert "OURO_OPENAI_KEY" not in env and "LC_TELEPHONE" not in env
    assert set(env) <= set(child_env()) | {"LC_CTYPE", "PWD"}  # PWD/LC_CTYPE: the interpreter's


def test_the_child_leads_its_own_process_group(tmp_path: Path) -> None:
    seen = tmp_path / "ids.json"
    spawn = Recorder(
        _wrapped(
            f"import json, os; open({str(seen)!r}, 'w')"
            ".write(json.dumps([os.getpid(), os.getpgid(0), os.getsid(0)]))"
        )
    )
    AuditHandle([sound(tmp_path / "lineages").paths], spawn=spawn).start().result(GATE)
    pid, group, session = json.loads(seen.read_text())
    assert pid == group == session
    assert group != os.getpgid(0)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_stop_kills_the_childs_whole_group(tmp_path: Path) -> None:
    grandchild = tmp_path / "grandchild.pid"
    spawn = Recorder(
        [
            sys.executable,
            "-c",
            "import subprocess, time\n"
            "p = subprocess.Popen(['sleep', '60'])\n"
            f"open({str(grandchild)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(60)",
        ]
    )
    handle = AuditHandle([sound(tmp_path / "lineages").paths], spawn=spawn).start()
    deadline = time.monotonic() + GATE
    while not (grandchild.exists() and grandchild.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    handle.stop()
    result = handle.result(GATE)
    assert (result.status, result.outcome) == ("unknown", "stopped")
    pid = int(grandchild.read_text())
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(pid), "the grandchild outlived the stop"


def test_a_real_child_that_hangs_times_out(tmp_path: Path) -> None:
    spawn = Recorder([sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    result = (
        AuditHandle([sound(tmp_path / "lineages").paths], spawn=spawn, timeout=0.5)
        .start()
        .result(GATE)
    )
    assert (result.status, result.outcome) == ("unknown", "timeout")
    assert time.monotonic() - started < 20


def test_a_chatty_real_child_is_refused(tmp_path: Path) -> None:
    spawn = Recorder([sys.executable, "-c", "import sys; sys.stdout.write('x' * 10_000_000)"])
    result = AuditHandle([sound(tmp_path / "lineages").paths], spawn=spawn).start().result(GATE)
    assert (result.status, result.outcome) == ("unknown", "refused")


def test_output_during_the_audit_never_reaches_the_report(tmp_path: Path) -> None:
    spawn = Recorder(
        _wrapped(
            "import os, reconciler.state.audit as a\n"
            "real = a.audit_lineage\n"
            "def noisy(*args, **kwargs):\n"
            "    print('python noise'); os.write(1, b'raw fd noise')\n"
            "    return real(*args, **kwargs)\n"
            "a.audit_lineage = noisy"
        )
    )
    result = AuditHandle([sound(tmp_path / "lineages").paths], spawn=spawn).start().result(GATE)
    assert (result.status, result.outcome) == ("consistent", "completed")


def test_output_that_does_reach_stdout_makes_the_report_untrusted(tmp_path: Path) -> None:
    spawn = Recorder(_wrapped("print('noise before the audit', flush=True)"))
    result = AuditHandle([sound(tmp_path / "lineages").paths], spawn=spawn).start().result(GATE)
    assert (result.status, result.outcome) == ("unknown", "refused")


# ------------------------------------------------------------------ the child's own protocol


def test_the_child_module_writes_exactly_one_report(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    job = audit_child.encode_job([("t", lineage.paths)], max_findings=10)
    done = subprocess.run(
        [sys.executable, "-m", "reconciler.state.audit_child"],
        input=job,
        capture_output=True,
        check=True,
        env=child_env(),
        timeout=GATE,
    )
    fields = sanitize_report(done.stdout, ["t"])
    assert fields is not None and fields["status"] == "consistent"


def test_the_child_audits_without_the_spec_models(tmp_path: Path) -> None:
    """A child starts per audit batch and per ``ouro verify``: it imports no pydantic (the
    spec's models were ~60 ms of its ~150 ms start), nor the spec's probe models, yet it
    checks probe records' digests. The report is out before the interpreter's tear-down."""
    lineage = sound(tmp_path)
    job = audit_child.encode_job([("t", lineage.paths)], max_findings=10)
    snippet = ("import os, sys\n"
               "real_exit = os._exit\n"
               "def exiting(code):\n"  # what is imported once the report is out
               "    sys.stderr.write(' '.join(sorted(\n"
               "        m for m in sys.modules if m.split('.')[0] == 'pydantic'\n"
               "        or m in ('reconciler.spec.models', 'reconciler.spec.probes'))) + '|')\n"
               "    sys.stderr.flush()\n"
               "    real_exit(code)\n"
               "os._exit = exiting\n")
    done = subprocess.run(_wrapped(snippet), input=job, capture_output=True, check=True,
                          env=child_env(), timeout=GATE)
    fields = sanitize_report(done.stdout, ["t"])
    assert fields is not None and fields["status"] == "consistent"
    assert done.stderr == b"|"  # nothing of them, and the exit after the report is os._exit


@pytest.mark.parametrize(
    "job",
    [
        b"",
        b"not json",
        b"[]",
        b'{"schema": "ouro-verify-job/v0", "lineages": [], "max_findings": 1}',
        b'{"schema": "ouro-verify-job/v2", "lineages": [{"name": 1}], "max_findings": 1}',
        b'{"schema": "ouro-verify-job/v2", "lineages": [], "max_findings": -1}',
    ],
    ids=["empty", "not-json", "array", "schema", "entry", "max-findings"],
)
def test_a_bad_job_is_reported_as_unknown(job: bytes) -> None:
    report = audit_child.run(io.BytesIO(job))
    assert report["status"] == "unknown" and report["lineages"] == []
    assert report["exception_class"] == "JobInvalid"


def test_findings_beyond_the_cap_are_counted_not_listed(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    for _ in range(5):
        lineage.no_change(calls=[Lineage.call(lineage.generation + 1, accounted="9.99")])
    job = audit_child.encode_job([("t", lineage.paths)], max_findings=2)
    report = audit_child.run(io.BytesIO(job))
    record = report["lineages"][0]
    assert (record["findings_total"], len(record["findings"])) == (5, 2)
    assert sanitize_report(json.dumps(report).encode(), ["t"], max_findings=2) is not None
