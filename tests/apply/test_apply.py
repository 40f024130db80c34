"""`ouro apply` end to end: real processes, real repositories, real bwrap and cgroups.

Generations here use the offline providers (echo, replay), so they are cheap but
real: every one goes through the broker, the sandbox and the transaction.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.apply.helpers import (
    QUIET_BODY,
    assert_invariant,
    observation_numbers,
    ouro_argv,
    refs,
    report,
    run_ouro,
    write_replies,
    write_spec,
)
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


def test_create_then_second_apply_is_a_no_op(specs: Path, env: dict[str, str],
                                             tmp_path: Path) -> None:
    write_spec(specs, "alpha", 2)
    first = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert first.returncode == 0, (first.stdout, first.stderr)
    lineage = report(first)["lineages"][0]
    assert lineage["planned_action"] == "create"
    assert lineage["generations_run"] == 2
    assert lineage["outcomes"] == {"no-change": 2}
    assert lineage["final_action"] == "in-sync"
    paths = lineage_paths(tmp_path / "state", "alpha")
    assert_invariant(paths, 2)

    before = refs(paths)
    files_before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "state").rglob("*")
                          if "events.jsonl" not in p.name)
    second = run_ouro("apply", "--yes", str(specs), env=env)
    assert second.returncode == 0, (second.stdout, second.stderr)
    assert "0 generations run" in second.stdout
    assert refs(paths) == before
    files_after = sorted(p.relative_to(tmp_path) for p in (tmp_path / "state").rglob("*")
                         if "events.jsonl" not in p.name)
    assert files_after == files_before


def test_extend_runs_only_the_missing_generations(specs: Path, env: dict[str, str],
                                                  tmp_path: Path) -> None:
    replies = write_replies(specs / "replies", [QUIET_BODY, QUIET_BODY.replace("quiet", "calm")])
    write_spec(specs, "beta", 1, provider="replay", replay=str(replies))
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    write_spec(specs, "beta", 3, provider="replay", replay=str(replies))
    result = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert result.returncode == 0, (result.stdout, result.stderr)
    lineage = report(result)["lineages"][0]
    assert lineage["planned_action"] == "extend"
    assert lineage["generations_run"] == 2
    # the audit read only the new generations: the first apply's clean verdict held
    assert lineage["audit"] == {"status": "consistent", "resumed": 1, "findings": []}
    # gen 1 installed the quiet body, which never asks the model again
    assert lineage["outcomes"] == {"no-change": 2}
    paths = lineage_paths(tmp_path / "state", "beta")
    assert_invariant(paths, 3)
    assert (paths.worktree / "organism.el").read_text() == QUIET_BODY


def test_ahead_is_reported_and_nothing_is_removed(specs: Path, env: dict[str, str],
                                                   tmp_path: Path) -> None:
    write_spec(specs, "gamma", 2)
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    write_spec(specs, "gamma", 1)
    result = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert report(result)["lineages"][0]["final_action"] == "ahead"
    assert_invariant(lineage_paths(tmp_path / "state", "gamma"), 2)


def test_refusal_beside_a_healthy_lineage(specs: Path, env: dict[str, str],
                                          tmp_path: Path) -> None:
    write_spec(specs, "healthy", 1)
    write_spec(specs, "damaged", 1)
    (tmp_path / "state" / "damaged").mkdir(parents=True)  # one of three places: partial
    result = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert result.returncode == 1
    by_name = {item["name"]: item for item in report(result)["lineages"]}
    assert by_name["healthy"]["generations_run"] == 1
    assert by_name["healthy"]["final_action"] == "in-sync"
    assert by_name["damaged"]["generations_run"] == 0
    assert by_name["damaged"]["final_action"] == "refuse"
    assert by_name["damaged"]["refusal"]
    assert sorted(p.name for p in (tmp_path / "state" / "damaged").iterdir()) == []


def test_max_spend_refuses_before_anything_runs(specs: Path, env: dict[str, str],
                                                tmp_path: Path) -> None:
    write_spec(specs, "paid", 3, provider="openai-compatible", extra_model="""
        name: local-model
        base_url: http://127.0.0.1:9/v1
        budget_usd: "0.50"
        price: {input_usd_per_mtok: "1.00", output_usd_per_mtok: "2.00"}
        """)
    result = run_ouro("apply", "--yes", "--max-spend", "1.00", str(specs), env=env)
    assert result.returncode == 1
    assert "may spend up to $1.50" in result.stderr
    assert "--max-spend $1.00" in result.stderr
    assert not (tmp_path / "state" / "paid").exists()


def test_without_a_terminal_apply_needs_yes(specs: Path, env: dict[str, str],
                                            tmp_path: Path) -> None:
    write_spec(specs, "delta", 1)
    result = run_ouro("apply", str(specs), env=env)
    assert result.returncode == 1
    assert "pass --yes" in result.stderr
    assert not (tmp_path / "state" / "delta").exists()


def test_max_generations_and_deadline_stop_at_a_boundary(specs: Path, env: dict[str, str],
                                                          tmp_path: Path) -> None:
    write_spec(specs, "eps", 3)
    paths = lineage_paths(tmp_path / "state", "eps")
    first = run_ouro("apply", "--yes", "--json", "--max-generations", "2", str(specs), env=env)
    assert first.returncode == 0, (first.stdout, first.stderr)
    assert report(first)["stopped_by"] == "max-generations"
    assert_invariant(paths, 2)
    stopped = run_ouro("apply", "--yes", "--json", "--deadline", "0s", str(specs), env=env)
    assert stopped.returncode == 0, (stopped.stdout, stopped.stderr)
    assert report(stopped)["stopped_by"] == "deadline"
    assert_invariant(paths, 2)
    rest = run_ouro("apply", "--yes", str(specs), env=env)
    assert rest.returncode == 0, (rest.stdout, rest.stderr)
    assert_invariant(paths, 3)


def test_stale_plan_file_is_refused(specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    write_spec(specs, "zeta", 1)
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    write_spec(specs, "zeta", 2)
    plan_file = tmp_path / "plan.json"
    planned = run_ouro("plan", "-o", str(plan_file), str(specs), env=env)
    assert planned.returncode == 2, planned.stderr
    # someone else extends the lineage after the plan was made
    write_spec(specs, "zeta", 2)
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    result = run_ouro("apply", "--yes", str(plan_file), env=env)
    assert result.returncode == 1
    assert "stale" in result.stderr
    assert "lineage zeta: refs/heads/lineage-zeta moved" in result.stderr


def test_fresh_plan_file_applies(specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    write_spec(specs, "eta", 1)
    plan_file = tmp_path / "plan.json"
    assert run_ouro("plan", "-o", str(plan_file), str(specs), env=env).returncode == 2
    result = run_ouro("apply", "--yes", str(plan_file), env=env)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert_invariant(lineage_paths(tmp_path / "state", "eta"), 1)


def test_two_concurrent_applies_never_run_a_generation_twice(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    write_spec(specs, "theta", 3)
    argv = ouro_argv("apply", "--yes", "--json", "--lock-timeout", "120", str(specs))
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    second = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    outputs = [p.communicate(timeout=300) for p in (first, second)]
    assert first.returncode == 0, outputs[0]
    assert second.returncode == 0, outputs[1]
    runs = sorted(report(subprocess.CompletedProcess([], 0, out, err))["lineages"][0]
                  ["generations_run"] for out, err in outputs)
    assert runs == [0, 3]  # one ran everything, the other waited and found it in sync
    assert_invariant(lineage_paths(tmp_path / "state", "theta"), 3)


def test_lock_timeout_names_the_holder(specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    from reconciler.engine.locks import LineageLock

    write_spec(specs, "iota", 1)
    paths = lineage_paths(tmp_path / "state", "iota")
    with LineageLock("iota", paths.git_dir, timeout=1):
        result = run_ouro("apply", "--yes", "--lock-timeout", "0.5", str(specs), env=env)
    assert result.returncode == 1
    # said once, in the summary on stdout; the progress on stderr points to it
    assert f"held by another apply (pid {os.getpid()}" in result.stdout
    assert "held by another apply" not in result.stderr
    assert "iota: 1 error; apply's summary (on stdout, at the end) says what" in result.stderr


def _wait_for(predicate: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_sigkill_mid_run_then_clean_reapply(specs: Path, env: dict[str, str],
                                            tmp_path: Path) -> None:
    write_spec(specs, "kappa", 4)
    paths = lineage_paths(tmp_path / "state", "kappa")
    process = subprocess.Popen(ouro_argv("apply", "--yes", str(specs)), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    _wait_for(lambda: len(observation_numbers(paths)) >= 1)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    result = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    lineage = report(result)["lineages"][0]
    assert result.returncode == 0, (lineage["errors"], lineage["refusal"], result.stderr)
    assert_invariant(paths, 4)


def test_first_interrupt_finishes_the_running_generation(specs: Path, env: dict[str, str],
                                                         tmp_path: Path) -> None:
    write_spec(specs, "lam", 50)
    paths = lineage_paths(tmp_path / "state", "lam")
    process = subprocess.Popen(ouro_argv("apply", "--yes", "--json", str(specs)), env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: len(observation_numbers(paths)) >= 1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    document = report(subprocess.CompletedProcess([], 130, out, err))
    assert document["interrupted"] is True
    done = len(observation_numbers(paths))
    assert 1 <= done < 50
    assert_invariant(paths, done)


@pytest.mark.parametrize(("desired", "code"), [(1, 0), (2, 1)], ids=["now-in-sync", "now-behind"])
def test_a_refusal_seen_while_another_apply_works_is_confirmed_under_the_lock(
    specs: Path, env: dict[str, str], tmp_path: Path, desired: int, code: int
) -> None:
    """Planned while another apply held the lineage half-made: re-planned under the lock,
    never run on the strength of a plan that did not show it (nor check its spend)."""
    from reconciler.engine.locks import LineageLock
    from reconciler.kernel.base.config import Ceilings, Identity, ModelConfig
    from reconciler.kernel.base.identity import fingerprint
    from reconciler.kernel.transaction import generation, lineage

    write_spec(specs, "mu", desired)
    paths = lineage_paths(tmp_path / "state", "mu")
    paths.git_dir.mkdir(parents=True)  # the other apply's creation, half done
    with LineageLock("mu", paths.git_dir, timeout=5):
        process = subprocess.Popen(ouro_argv("apply", "--yes", "--lock-timeout", "60",
                                             str(specs)), env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        assert process.stdout is not None
        seen = ""
        while "Plan:" not in seen:  # the plan is apply's output (stdout), flushed before it runs
            line = process.stdout.readline()
            assert line, seen
            seen += line
        assert "partial" in seen or "refuse" in seen, seen
        paths.git_dir.rmdir()  # ... the other apply finishes its work
        identity = Identity("https://example.invalid/ouro.git", "main",
                            env["OURO_INSTRUMENT_COMMIT"], fingerprint())
        lineage.init_lineage(paths, identity)
        generation.run_generation(paths=paths, identity=identity,
                                  model=ModelConfig("echo", "echo"),
                                  ceilings=Ceilings(wall_seconds=60, cpu_seconds=30,
                                                    memory_bytes=512 << 20), api_key=None)
    out, err = process.communicate(timeout=120)
    assert process.returncode == code, seen + out + err
    assert_invariant(paths, 1)
    if code:
        assert "changed while this apply was planning" in out  # the summary, said once
        assert "changed while this apply was planning" not in err


def test_observations_record_the_spec_and_its_git_commit(specs: Path, env: dict[str, str],
                                                          tmp_path: Path) -> None:
    import json

    write_spec(specs, "nu", 1)
    for args in (["init", "-q", "-b", "main"], ["add", "nu.yaml"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm",
                  "spec"]):
        subprocess.run(["git", *args], cwd=specs, check=True, capture_output=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=specs, check=True,
                            capture_output=True, text=True).stdout.strip()
    planned = json.loads(run_ouro("plan", "--json", str(specs), env=env).stdout)
    result = run_ouro("apply", "--yes", str(specs), env=env)
    assert result.returncode == 0, (result.stdout, result.stderr)
    paths = lineage_paths(tmp_path / "state", "nu")
    record = json.loads((paths.observations / "generations" / "0001.json").read_text())
    assert record["provenance"] == {
        "spec_sha256": planned["lineages"][0]["spec_sha256"],
        "spec_repository_commit": commit,
        "spec_path": "nu.yaml",
    }
    events = [json.loads(line) for line in
              (tmp_path / "state" / "events.jsonl").read_text().splitlines()]
    assert [e["generation"] for e in events if e["event"] == "generation"] == [1]


def test_a_missing_api_key_creates_nothing_and_names_the_variable(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    write_spec(specs, "xi", 1, provider="openai", extra_model="""
        name: gpt-5.6
        api_key_env: OURO_TEST_ABSENT_KEY
        """)
    write_spec(specs, "omicron", 1)
    env = {k: v for k, v in env.items() if k != "OURO_TEST_ABSENT_KEY"}
    result = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert result.returncode == 1
    by_name = {item["name"]: item for item in report(result)["lineages"]}
    assert "OURO_TEST_ABSENT_KEY" in by_name["xi"]["refusal"]  # refused by the plan
    assert "OURO_TEST_ABSENT_KEY=" not in result.stdout + result.stderr
    assert not (tmp_path / "state" / "xi").exists()
    assert not (tmp_path / "state" / "xi.git").exists()
    assert sorted(p.name for p in (tmp_path / "state").glob("xi*")) == []  # nor a lock
    assert by_name["omicron"]["final_action"] == "in-sync"


def test_parallel_lineages_of_one_apply_all_run(specs: Path, env: dict[str, str],
                                                tmp_path: Path) -> None:
    """Lineages share the apply's process: none may disturb another's scopes or repos."""
    names = [f"par-{i}" for i in range(4)]
    for name in names:
        write_spec(specs, name, 3)
    result = run_ouro("apply", "--yes", "--json", "--parallel", "4", str(specs), env=env)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert all(item["generations_run"] == 3 and not item["errors"]
               for item in report(result)["lineages"])
    for name in names:
        assert_invariant(lineage_paths(tmp_path / "state", name), 3)


def test_a_corrupt_object_is_a_refusal_of_apply_not_an_internal_error(
    specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 13: a corrupt blob the kernel must read (the organism's body) is found when
    the generation reads it: apply reports a refusal naming the repair, exit 1."""
    import zlib

    import pygit2

    write_spec(specs, "rotten", 1)
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    write_spec(specs, "rotten", 2)
    paths = lineage_paths(tmp_path / "state", "rotten")
    repo = pygit2.Repository(str(paths.git_dir))
    head = repo.revparse_single(f"refs/heads/{paths.branch}")
    assert isinstance(head, pygit2.Commit)
    hexid = str(head.tree["organism.el"].id)
    loose = paths.git_dir / "objects" / hexid[:2] / hexid[2:]
    good = loose.read_bytes()
    loose.chmod(0o644)
    inner = zlib.decompress(good)
    loose.write_bytes(zlib.compress(inner[:-2] + b"X\n"))
    result = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert result.returncode == 1, result.stderr
    assert "internal error" not in result.stdout + result.stderr
    (item,) = report(result)["lineages"]
    assert item["generations_run"] == 0
    assert "missing or corrupt" in item["refusal"] and "git fsck" in item["refusal"]
    loose.write_bytes(good)  # restored from a backup: the lineage goes on
    again = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert report(again)["lineages"][0]["generations_run"] == 1
