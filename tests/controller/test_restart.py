"""Killed and restarted, the controller resumes from the repositories alone; a second
controller on the same state dir refuses, naming the first."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from reconciler.kernel.base.formats import MARKER_FILE
from tests.apply.helpers import REPO_ROOT, assert_invariant, ouro_argv, run_ouro
from tests.apply.test_model_failures import route
from tests.controller.harness import Running, SpecRepo, events, spec_text
from tests.fakes.provider_server import FakeProvider, chat_ok
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

VARIABLE = "OURO_CONTROLLER_TEST_KEY"


def _started(state: Path, number: int) -> bool:
    return any(e["event"] == "generation-started" and e.get("generation") == number
               for e in events(state))


# The model answers each call with the seed organism after this long: a generation lasts
# at least that, so the kill lands inside one (an echo generation, ~0.1 s, was missed by
# the 0.2 s polling on a fast host).
SLOW_REPLY_S = 2.0


def test_sigkill_mid_generation_then_restart_loses_nothing_and_runs_nothing_twice(
        spec_repo: SpecRepo, state: Path, env: dict[str, str]) -> None:
    seed = (REPO_ROOT / "reconciler" / "kernel" / "transaction" / "organism.el").read_text()
    reply = dataclasses.replace(chat_ok(seed, prompt_tokens=10, completion_tokens=10),
                                delay=SLOW_REPLY_S)
    env = {**env, VARIABLE: "sk-0123456789abcdef"}
    with FakeProvider(route("openai-compatible", reply)) as fake:
        model = (f"name: local-model\nbase_url: {fake.url}/v1\n"
                 'price: {input_usd_per_mtok: "1", output_usd_per_mtok: "1"}\n'
                 f"api_key_env: {VARIABLE}\n")
        spec_repo.commit("alpha", {"alpha.yaml": spec_text(
            "alpha", 3, provider="openai-compatible", extra=model)})
        first = Running(spec_repo.bare, state, env=env)
        # started, and its intent marker written: a kill between the two (or after the
        # generation ended) leaves nothing to recover, which is not what this test is about
        marker = Path(lineage_paths(state, "alpha").git_dir) / MARKER_FILE
        first.wait(lambda: _started(state, 2) and marker.exists(), "generation 2 running")
        first.kill()
        shutil.rmtree(state / ".controller")  # the cache is deletable: the repositories do
        second = Running(spec_repo.bare, state, env=env)
        try:
            second.wait(lambda: second.lineage("alpha").get("generations") == 3
                        and second.condition("alpha", "Ready").get("status") == "True",
                        "alpha finished after the restart")
        finally:
            assert second.stop() == 0, second.output()
    assert_invariant(lineage_paths(state, "alpha"), 3)
    published = [e["generation"] for e in events(state)
                 if e["event"] == "generation" and e["lineage"] == "alpha"]
    assert sorted(published) == sorted(set(published))
    assert set(published) <= {1, 2, 3}
    # the killed generation was found and recovered (published nothing, or rolled forward)
    assert any(e["event"] == "recovered" and e["lineage"] == "alpha" for e in events(state))
    verify = run_ouro("verify", str(state / ".controller" / "cache" / "specs" / "specs"),
                      env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_second_controller_refuses_naming_the_first(spec_repo: SpecRepo, state: Path,
                                                     env: dict[str, str]) -> None:
    import subprocess

    spec_repo.commit("empty", {"alpha.yaml": spec_text("alpha", 0)})
    first = Running(spec_repo.bare, state, env=env)
    try:
        first.wait(lambda: first.status().get("controller", {}).get("revision"), "started")
        second = subprocess.run(
            ouro_argv("controller", "--repo", str(spec_repo.bare), "--state-dir", str(state)),
            env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert second.returncode == 1
        assert "another controller runs on this state dir" in second.stderr
        assert f"pid {first.process.pid} on " in second.stderr
        assert "controller --repo" in second.stderr  # its command
        status = run_ouro("status", "--state-dir", str(state), env=env)
        assert "(running: pid" in status.stdout, status.stdout
    finally:
        assert first.stop() == 0, first.output()
    status = run_ouro("status", "--state-dir", str(state), env=env)
    assert "(not running: pid" in status.stdout, status.stdout
