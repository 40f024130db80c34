"""What apply produces and where: the plan and a line for every lineage on stdout
(an internal error included), progress on stderr, one format_version scheme in
every JSON document, and a fresh saved plan applied without a second question."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apply.helpers import REPO_ROOT, assert_invariant, run_ouro, write_spec
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

# ouro whose kernel fails (a bug) on the second generation of lineage "beta" only.
BROKEN_SECOND_GENERATION = """
import sys
from reconciler.kernel.transaction import generation
real = generation.run_generation
def run_generation(*args, **kwargs):
    paths = kwargs["paths"]
    if paths.branch.endswith("beta") and (paths.observations / "generations").is_dir() \\
            and any((paths.observations / "generations").iterdir()):
        raise RuntimeError("the disk is on fire")
    return real(*args, **kwargs)
generation.run_generation = run_generation
from reconciler.cli import main
sys.argv[0] = "ouro"
main()
"""


def test_a_fresh_saved_plan_applies_without_asking(tmp_path: Path, env: dict[str, str]) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "eta", 1)
    plan_file = tmp_path / "plan.json"
    assert run_ouro("plan", "-o", str(plan_file), str(specs), env=env).returncode == 2
    result = run_ouro("apply", str(plan_file), env=env)  # no --yes, no terminal
    assert result.returncode == 0, result.stderr
    assert "pass --yes" not in result.stderr
    assert_invariant(lineage_paths(tmp_path / "state", "eta"), 1)
    saved = json.loads(plan_file.read_text())
    assert (saved["format_version"], saved["kind"]) == (1, "ouro-plan-file")


def test_without_a_saved_plan_apply_still_asks(tmp_path: Path, env: dict[str, str]) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "eta", 1)
    result = run_ouro("apply", str(specs), env=env)
    assert result.returncode == 1
    assert "pass --yes" in result.stderr


def test_text_apply_shows_every_lineage_on_stdout_and_progress_on_stderr(
        tmp_path: Path, env: dict[str, str]) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "alpha", 2)
    write_spec(specs, "beta", 3)
    write_spec(specs, "gamma", 0)
    done = subprocess.run([sys.executable, "-c", BROKEN_SECOND_GENERATION, "apply", "--yes",
                           "--parallel", "1", str(specs)], cwd=REPO_ROOT, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "Plan:" in out  # the plan is apply's output too
    assert "alpha: in-sync, 2 of 2 generations; ran 2 (2 no-change), spent $0" in out
    assert "beta: extend, 1 of 3 generations; ran 1 (1 no-change), spent $0" in out
    assert ("  error: ouro: internal error (RuntimeError: the disk is on fire); "
            "this is a bug in ouro") in out
    assert "gamma: in-sync, 0 of 0 generations; ran 0, spent $0" in out
    assert "Applied: 3 generations run" in out
    assert "gen 1 of 2" in done.stderr and "Applied:" not in done.stderr  # progress only
    assert_invariant(lineage_paths(tmp_path / "state", "beta"), 1)


def test_every_json_document_has_format_version_and_kind(tmp_path: Path,
                                                         env: dict[str, str]) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "iota", 1)
    kinds = {}
    for command in (["plan", "--json"], ["apply", "--yes", "--json"], ["status", "--json"],
                    ["verify", "--json"]):
        done = run_ouro(*command, str(specs), env=env)
        assert done.returncode in (0, 2), done.stderr
        document = json.loads(done.stdout)
        assert document["format_version"] == 1, command
        kinds[command[0]] = document["kind"]
    assert kinds == {"plan": "ouro-plan", "apply": "ouro-apply", "status": "ouro-status",
                     "verify": "ouro-verify"}


@pytest.mark.slow  # 10 s or more on a loaded 2-core host
def test_plan_and_status_name_the_apply_running_a_lineage(tmp_path: Path,
                                                          env: dict[str, str]) -> None:
    import socket
    import time
    from dataclasses import replace

    from tests.apply.helpers import QUIET_BODY, ouro_argv
    from tests.fakes.provider_server import FakeProvider, chat_ok, script

    specs = tmp_path / "specs"
    specs.mkdir()
    with FakeProvider(script(replace(chat_ok(QUIET_BODY, 100, 50), delay=6.0))) as fake:
        write_spec(specs, "kappa", 2, provider="openai-compatible", extra_model=f"""
            name: local-test
            base_url: {fake.url}/v1
            price: {{input_usd_per_mtok: "1.00", output_usd_per_mtok: "2.00"}}
        """)
        running = subprocess.Popen(ouro_argv("apply", "--yes", str(specs)), cwd=REPO_ROOT,
                                   env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not fake.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert fake.requests, "the apply never asked the model"
            expected = f"running in apply pid {running.pid} on {socket.gethostname()}, generation 1"
            plan = run_ouro("plan", str(specs), env=env)
            status = run_ouro("status", str(specs), env=env)
            document = json.loads(run_ouro("plan", "--json", str(specs), env=env).stdout)
        finally:
            out, err = running.communicate(timeout=120)
    assert running.returncode == 0, out + err
    assert expected in plan.stdout, plan.stdout
    assert "discards it" not in plan.stdout and "interrupted" not in plan.stdout
    assert f"  {expected}" in status.stdout, status.stdout
    assert document["lineages"][0]["running"] == expected
    assert_invariant(lineage_paths(tmp_path / "state", "kappa"), 2)
