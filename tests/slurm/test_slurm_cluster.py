"""`ouro apply --executor slurm` on a real single-node Slurm: the suite's own (conftest.py).

Every lineage here runs as a real Slurm job (munged, slurmctld, slurmd), inside which the
ordinary engine runs real generations (bwrap, cgroups, Emacs) on the shared state dir.
The invariant checked after each story: N generation commits, N observations, no
generation run twice, the audit consistent. Every exit code is checked before stdout is
read as JSON, showing stderr: a refusal fails with ouro's message, not a JSON error.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine.lockfs import TRUST_OVERRIDE_ENV, lock_trust
from reconciler.kernel.base.formats import MARKER_FILE
from tests.apply.helpers import (
    UNASKED,
    assert_invariant,
    observation_numbers,
    ouro_argv,
    report,
    run_ouro,
    write_replies,
    write_spec,
)
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slurm, pytest.mark.slow]

SLOW_BODY = '(progn (sleep-for {seconds}) (message "slow life"))\n'


def _document(result: subprocess.CompletedProcess[str], code: int) -> dict[str, Any]:
    """apply's JSON report, once its exit code is the expected one (else: its stderr)."""
    assert result.returncode == code, (
        f"exit {result.returncode}, expected {code}\nstderr:\n{result.stderr}\n"
        f"stdout:\n{result.stdout}")
    return report(result)


def _communicated(process: subprocess.Popen[str], code: int,
                  timeout: float) -> dict[str, Any]:
    out, err = process.communicate(timeout=timeout)
    return _document(subprocess.CompletedProcess(process.args, process.returncode, out, err),
                     code)


def _with_executor(path: Path, settings: str = "time: 10m") -> Path:
    path.write_text(path.read_text() + "  executor:\n    slurm: {" + settings + "}\n")
    return path


def _events(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "state" / "events.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()]


def _generation_events(tmp_path: Path, name: str) -> list[int]:
    return [e["generation"] for e in _events(tmp_path)
            if e["event"] == "generation" and e.get("lineage") == name]


def _wait_for(predicate: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def _started(tmp_path: Path, name: str, generation: int) -> bool:
    log = tmp_path / "state" / "events.jsonl"
    if not log.exists():
        return False
    return any(e["event"] == "generation-started" and e.get("lineage") == name
               and e.get("generation") == generation for e in _events(tmp_path))


def _job_state(job: str) -> str:
    done = subprocess.run(["squeue", "-h", "--states=all", "-o", "%T", "-j", job],
                          capture_output=True, text=True, timeout=20)
    return done.stdout.strip()


def _kill_outright(job: str) -> None:
    """SIGKILL every process of the job at once (as a node's OOM killer or a crash would)."""
    listing = subprocess.run(["scontrol", "listpids", job], capture_output=True, text=True,
                             timeout=20, check=True).stdout
    pids = [int(line.split()[0]) for line in listing.splitlines()[1:] if line.split()]
    assert pids, listing
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_fleet_of_four_runs_as_four_jobs(specs: Path, env: dict[str, str],
                                           tmp_path: Path) -> None:
    names = ["sl-a", "sl-b", "sl-c", "sl-d"]
    for index, name in enumerate(names):
        _with_executor(write_spec(specs, name, 2 + index % 2))
    result = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs), env=env)
    document = _document(result, 0)
    for index, name in enumerate(names):
        assert_invariant(lineage_paths(tmp_path / "state", name), 2 + index % 2)
        assert _generation_events(tmp_path, name) == list(range(1, 3 + index % 2))
    submitted = [e for e in _events(tmp_path) if e["event"] == "job-submitted"]
    assert sorted(e["lineage"] for e in submitted) == names
    jobs = {e["executor_job"] for e in submitted}
    assert len(jobs) == 4
    # every generation was run by one of this apply's jobs, on the node
    ran = [e for e in _events(tmp_path) if e["event"] == "generation"]
    assert {e["executor_job"] for e in ran} == jobs
    assert sum(item["generations_run"] for item in document["lineages"]) == 10
    assert all(item["audit"]["status"] == "consistent" for item in document["lineages"])
    # a job whose result was read leaves no folder behind (a failed one keeps its log)
    assert not [job for job in jobs if (tmp_path / "state" / "slurm-jobs" / job).exists()]
    again = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs), env=env)
    _document(again, 0)
    assert "submitted" not in again.stderr  # in sync: no job at all


@pytest.mark.parametrize("how", ["TERM", "KILL"], ids=["scancel", "scancel-kill"])
def test_a_job_cancelled_mid_generation_is_recovered_by_the_next_apply(
    specs: Path, env: dict[str, str], tmp_path: Path, how: str
) -> None:
    """scancel (SIGTERM to every process of the job) cancels the running generation: it
    publishes nothing. SIGKILL to all of them leaves it half done: the kernel's recovery
    at the next apply handles it. Either way the next apply runs it once."""
    replies = write_replies(specs / "replies", [SLOW_BODY.format(seconds=10), UNASKED])
    _with_executor(write_spec(specs, "sl-cut", 3, provider="replay", replay=str(replies)))
    write_spec(specs, "sl-ok", 2)  # beside it, a lineage the cancel must not touch
    _with_executor(specs / "sl-ok.yaml")
    paths = lineage_paths(tmp_path / "state", "sl-cut")
    process = subprocess.Popen(
        ouro_argv("apply", "--yes", "--json", "--executor", "slurm", str(specs)),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # started, and its intent marker written: a kill between the two leaves nothing to
    # recover, which is not what this test is about
    marker = Path(paths.git_dir) / MARKER_FILE
    _wait_for(lambda: _started(tmp_path, "sl-cut", 2) and marker.exists())
    job = next(e["executor_job"] for e in _events(tmp_path)
               if e["event"] == "job-submitted" and e["lineage"] == "sl-cut")
    if how == "KILL":
        _kill_outright(job)
    else:
        subprocess.run(["scancel", job], check=True, timeout=20)
    document = _communicated(process, 1, 300)  # one lineage's job was cancelled: not in sync
    cut = next(item for item in document["lineages"] if item["name"] == "sl-cut")
    expected = "was cancelled (SIGTERM" if how == "TERM" else f"job {job} of sl-cut ended"
    assert any(expected in e for e in cut["errors"]), cut
    assert observation_numbers(paths) == [1]  # generation 2 never published
    assert_invariant(lineage_paths(tmp_path / "state", "sl-ok"), 2)

    again = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs), env=env)
    document = _document(again, 0)
    cut = next(item for item in document["lineages"] if item["name"] == "sl-cut")
    if how == "KILL":
        assert cut["recovered"], cut  # the killed attempt was recovered first
    assert cut["generations_run"] == 2
    assert_invariant(paths, 3)
    assert Counter(_generation_events(tmp_path, "sl-cut")) == Counter([1, 2, 3])


def test_two_submitting_applies_race_on_one_fleet(specs: Path, env: dict[str, str],
                                                  tmp_path: Path) -> None:
    names = ["sl-r1", "sl-r2", "sl-r3", "sl-r4"]
    for name in names:
        _with_executor(write_spec(specs, name, 3))
    argv = ouro_argv("apply", "--yes", "--json", "--executor", "slurm", "--lock-timeout", "200",
                     str(specs))
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    second = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    documents = [_communicated(p, 0, 400) for p in (first, second)]
    for name in names:
        runs = [next(i for i in d["lineages"] if i["name"] == name)["generations_run"]
                for d in documents]
        assert sum(runs) == 3, (name, runs)  # between them, each generation ran once
        assert_invariant(lineage_paths(tmp_path / "state", name), 3)
        assert sorted(_generation_events(tmp_path, name)) == [1, 2, 3]


def test_a_job_at_its_time_limit_stops_at_a_boundary_and_is_continued(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    # A 3-minute job may start generations in its first 30 s only (3m - 90 s warning -
    # 30 s margin - 30 s wall); generations of 12 s: the job stops at a boundary and a
    # second job runs the rest.
    replies = write_replies(specs / "replies", [SLOW_BODY.format(seconds=12), UNASKED])
    spec = write_spec(specs, "sl-time", 5, provider="replay", replay=str(replies))
    spec.write_text(spec.read_text().replace("wall: 60s", "wall: 30s").replace(
        "cpu: 30s", "cpu: 20s"))
    _with_executor(spec, "time: 3m")
    result = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs), env=env,
                      timeout=600)
    document = _document(result, 0)
    paths = lineage_paths(tmp_path / "state", "sl-time")
    assert_invariant(paths, 5)
    requeued = [e for e in _events(tmp_path) if e["event"] == "job-requeued"]
    assert requeued, _events(tmp_path)
    ran = [e for e in _events(tmp_path) if e["event"] == "generation"]
    assert sorted(e["generation"] for e in ran) == [1, 2, 3, 4, 5]
    assert len({e["executor_job"] for e in ran}) >= 2
    assert document["lineages"][0]["generations_run"] == 5


def test_one_interrupt_detaches_and_the_job_goes_on(specs: Path, env: dict[str, str],
                                                    tmp_path: Path) -> None:
    replies = write_replies(specs / "replies", [SLOW_BODY.format(seconds=6), UNASKED])
    _with_executor(write_spec(specs, "sl-det", 3, provider="replay", replay=str(replies)))
    process = subprocess.Popen(
        ouro_argv("apply", "--yes", "--executor", "slurm", str(specs)),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _wait_for(lambda: _started(tmp_path, "sl-det", 1))
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "goes on without this apply" in err
    paths = lineage_paths(tmp_path / "state", "sl-det")
    _wait_for(lambda: len(observation_numbers(paths)) == 3, timeout=180)
    _wait_for(lambda: not (paths.git_dir.parent / "sl-det.git.ouro-lock.json").exists())
    assert_invariant(paths, 3)
    again = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs), env=env)
    assert _document(again, 0)["lineages"][0]["generations_run"] == 0


def test_two_interrupts_cancel_the_jobs(specs: Path, env: dict[str, str],
                                        tmp_path: Path) -> None:
    replies = write_replies(specs / "replies", [SLOW_BODY.format(seconds=10), UNASKED])
    _with_executor(write_spec(specs, "sl-stop", 3, provider="replay", replay=str(replies)))
    process = subprocess.Popen(
        ouro_argv("apply", "--yes", "--json", "--executor", "slurm", str(specs)),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _wait_for(lambda: _started(tmp_path, "sl-stop", 2))
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    job = next(e["executor_job"] for e in _events(tmp_path) if e["event"] == "job-submitted")
    assert _job_state(job) in ("CANCELLED", ""), _job_state(job)
    paths = lineage_paths(tmp_path / "state", "sl-stop")
    assert observation_numbers(paths) == [1]
    again = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs), env=env)
    _document(again, 0)
    assert_invariant(paths, 3)


def test_a_time_limit_too_short_for_one_generation_is_refused(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    _with_executor(write_spec(specs, "sl-short", 1), "time: 2m")
    result = run_ouro("apply", "--yes", "--executor", "slurm", str(specs), env=env)
    assert result.returncode == 1, result.stderr
    # a lineage's error is printed once, in the summary (stdout); progress points to it
    assert "spec.executor.slurm.time 120s is too short" in result.stdout
    assert f"{specs / 'sl-short.yaml'}:1" in result.stdout
    assert "sl-short: 1 error; apply's summary (on stdout, at the end) says what" in result.stderr
    assert not (tmp_path / "state" / "sl-short.git").exists()


def test_an_unknown_partition_is_refused_naming_the_spec(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    _with_executor(write_spec(specs, "sl-part", 1), "time: 10m, partition: no-such-part")
    result = run_ouro("apply", "--yes", "--executor", "slurm", str(specs), env=env)
    assert result.returncode == 1, result.stderr
    assert f"{specs / 'sl-part.yaml'}:1: spec.executor.slurm.partition no-such-part" in (
        result.stderr)
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "sl-part.git").exists()


def test_sbatch_refusing_a_job_is_an_error_of_that_lineage(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    _with_executor(write_spec(specs, "sl-acct", 1), 'time: 10m, sbatch: ["--gres=nosuch:1"]')
    _with_executor(write_spec(specs, "sl-fine", 1))
    result = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs), env=env)
    document = _document(result, 1)
    bad = next(item for item in document["lineages"] if item["name"] == "sl-acct")
    assert any("sbatch refused the job of sl-acct" in e for e in bad["errors"]), bad
    assert "Traceback" not in result.stderr
    assert_invariant(lineage_paths(tmp_path / "state", "sl-fine"), 1)


def test_a_refused_key_is_probed_before_any_job_is_submitted(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    from tests.apply.test_model_failures import KEY, VARIABLE, paid_spec, route
    from tests.fakes.provider_server import FakeProvider, openai_error

    env[VARIABLE] = KEY
    refused = openai_error(401, "invalid_api_key", f"Incorrect API key provided: {KEY}.")
    with FakeProvider(route("openai-compatible", refused, models=refused)) as fake:
        paid_spec(specs, "sl-key", "openai-compatible", fake.url + "/v1", 2)
        _with_executor(specs / "sl-key.yaml")
        result = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs),
                          env=env)
    (item,) = _document(result, 1)["lineages"]
    (error,) = item["errors"]
    assert VARIABLE in error and "nothing was created" in error
    assert KEY not in result.stdout + result.stderr
    assert [(s.method, s.path) for s in fake.requests] == [("GET", "/v1/models")]
    names = [e["event"] for e in _events(tmp_path)]
    assert "probe-failed" in names and "job-submitted" not in names
    assert not (tmp_path / "state" / "sl-key").exists()
    assert not (tmp_path / "state" / "sl-key.git").exists()


def test_doctor_runs_a_life_in_a_job(env: dict[str, str]) -> None:
    result = run_ouro("doctor", "--executor", "slurm", env=env, timeout=300)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "a life in the sandbox" in result.stdout
    assert "ceilings by" in result.stdout
    assert "on node" in result.stdout


def test_a_preempted_job_is_requeued_and_continues(specs: Path, env: dict[str, str],
                                                   tmp_path: Path) -> None:
    """USR2 is Slurm's warning before preemption (and what submitit's own tests send): the
    checkpointable job is requeued by submitit with the same request, re-plans under the
    lock when it runs again and finishes the lineage; nothing runs twice."""
    replies = write_replies(specs / "replies", [SLOW_BODY.format(seconds=8), UNASKED])
    _with_executor(write_spec(specs, "sl-pre", 3, provider="replay", replay=str(replies)))
    process = subprocess.Popen(
        ouro_argv("apply", "--yes", "--json", "--executor", "slurm", str(specs)),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _wait_for(lambda: _started(tmp_path, "sl-pre", 2))
    job = next(e["executor_job"] for e in _events(tmp_path) if e["event"] == "job-submitted")
    subprocess.run(["scancel", "--signal=USR2", job], check=True, timeout=20)
    _communicated(process, 0, 400)
    paths = lineage_paths(tmp_path / "state", "sl-pre")
    assert_invariant(paths, 3)
    published = _generation_events(tmp_path, "sl-pre")
    assert Counter(published) == Counter([1, 2, 3]), published
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True,
                           timeout=20).stdout
    assert "Restarts=1" in shown, shown  # requeued once, by submitit's checkpoint
    # one job id throughout: Slurm requeued the same job
    ran = {e["executor_job"] for e in _events(tmp_path) if e["event"] == "generation"}
    assert ran == {job}


def test_a_one_node_cluster_whose_node_is_localhost_is_this_host(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The suite's node is called localhost, not by this host's name: it is this host all
    the same, so a lock on a local filesystem holds and the fleet is not refused."""
    shown = subprocess.run(["scontrol", "-o", "show", "node"], capture_output=True, text=True,
                           timeout=20, check=True).stdout
    assert shown.startswith("NodeName=localhost ") and "NodeAddr=127.0.0.1 " in shown, shown
    assert lock_trust(tmp_path).scope == "host"  # not a cluster filesystem
    env.pop(TRUST_OVERRIDE_ENV, None)
    _with_executor(write_spec(specs, "sl-here", 1))
    document = _document(run_ouro("apply", "--yes", "--json", "--executor", "slurm",
                                  str(specs), env=env), 0)
    assert document["lineages"][0]["generations_run"] == 1
    assert_invariant(lineage_paths(tmp_path / "state", "sl-here"), 1)


def test_a_refusal_with_json_prints_a_document(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    _with_executor(write_spec(specs, "sl-nowhere", 1), "time: 10m, partition: no-such-part")
    result = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs), env=env)
    document = _document(result, 1)
    message = f"{specs / 'sl-nowhere.yaml'}:1: spec.executor.slurm.partition no-such-part"
    assert message in document["error"] and document["lineages"] == []
    assert document["kind"] == "ouro-apply"
    assert message in result.stderr  # and the message, as without --json
    assert not (tmp_path / "state" / "sl-nowhere.git").exists()


def test_a_jobs_model_failure_and_stop_come_back_to_the_report(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """What the job's engine knew of the lineage (its model failures, the last one, why it
    stopped) reaches the submitting apply's report: nothing is lost on the way back."""
    from tests.apply.test_model_failures import KEY, VARIABLE, paid_spec, route
    from tests.fakes.provider_server import FakeProvider, openai_error

    env[VARIABLE] = KEY
    quota = openai_error(429, "insufficient_quota", "You exceeded your current quota, please "
                         "check your plan and billing details.", "insufficient_quota")
    with FakeProvider(route("openai", quota)) as fake:
        paid_spec(specs, "sl-quota", "openai", fake.url + "/v1", 3)
        _with_executor(specs / "sl-quota.yaml")
        result = run_ouro("apply", "--yes", "--json", "--executor", "slurm", str(specs),
                          env=env)
    (item,) = _document(result, 1)["lineages"]
    assert item["generations_run"] == 1 and item["stopped"] == "quota", item
    assert item["model_failures"] == 1
    assert item["last_model_failure"]["code"] == "quota"
    assert any("stopped after gen 1" in error for error in item["errors"]), item
    ran = [e for e in _events(tmp_path) if e["event"] == "generation"]
    assert [e["executor_job"] for e in ran] and len(ran) == 1  # in a job, not here
    assert_invariant(lineage_paths(tmp_path / "state", "sl-quota"), 1)
