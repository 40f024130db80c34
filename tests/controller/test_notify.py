"""Notifications: each transition POSTed once, in order, to a loopback webhook (and to a
command); a webhook that hangs or answers 500 never slows a generation."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from reconciler.engine.controller.notify import AUTHORIZATION_VARIABLE
from tests.apply.test_model_failures import route
from tests.controller.harness import Hook, Running, SpecRepo, events, spec_text
from tests.fakes.provider_server import FakeProvider, openai_error

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

OTHER = "c" * 40  # an instrument pin this ouro is not: the plan refuses it
VARIABLE = "OURO_CONTROLLER_TEST_KEY"


def _refusing_provider(url: str) -> str:
    """A lineage whose provider refuses the model for good (403): stopped after gen 1."""
    model = (f"name: local-model\nbase_url: {url}/v1\nbudget_usd: \"0.50\"\n"
             'price: {input_usd_per_mtok: "1", output_usd_per_mtok: "2"}\n'
             f"api_key_env: {VARIABLE}\n")
    return spec_text("denied", 3, provider="openai-compatible", extra=model)


def test_each_transition_is_notified_once_in_order(spec_repo: SpecRepo, state: Path,
                                                  env: dict[str, str],
                                                  tmp_path: Path) -> None:
    hook = Hook()
    received = tmp_path / "received.jsonl"
    pinned = spec_text("pinned", 1) + f"  instrument:\n    commit: {OTHER}\n"
    fake = FakeProvider(route("openai-compatible",
                              openai_error(403, None, "not allowed to use this model")))
    with fake:
        spec_repo.commit("two lineages", {"denied.yaml": _refusing_provider(fake.url),
                                          "pinned.yaml": pinned})
        running = Running(spec_repo.bare, state, "--notify", hook.url + "?t=$HOOK_TOKEN",
                          "--notify-command", f"cat >> {received}",
                          env={**env, VARIABLE: "sk-0123456789abcdef", "HOOK_TOKEN": "secret",
                               AUTHORIZATION_VARIABLE: "Bearer x"})
        try:
            running.wait(lambda: len(hook.received) >= 2, "the stop and the refusal")
            bad = spec_repo.commit("bad", {"broken.yaml": "apiVersion: ouro/v1\nkind: [\n"})
            running.wait(lambda: len(hook.received) >= 3, "the bad commit")
            time.sleep(6)  # three more intervals: nothing is notified again
        finally:
            assert running.stop() == 0, running.output()
            hook.close()
    # once each, in the order they happened (the stop and the refusal may come in either
    # order: the first pass may end at its deadline before the denied lineage's gen 1)
    assert sorted(hook.events()[:2]) == ["lineage-stopped", "refused"], running.output()
    assert hook.events()[2:] == ["bad-commit"], (hook.events(), running.output())
    assert [item["at"] for item in hook.received] == sorted(item["at"] for item in hook.received)
    by_event = {item["event"]: item for item in hook.received}
    stopped, refused, broken = (by_event[e] for e in ("lineage-stopped", "refused", "bad-commit"))
    assert stopped["lineage"] == "denied" and stopped["reason"] == "permission"
    assert "denied stopped after gen 1 (permission)" in stopped["text"]
    # the progress names where the reason is said (the controller prints no summary)
    assert ("denied: stopped (permission); `ouro status` (the lineage's conditions) says "
            "why") in running.output()
    assert refused["lineage"] == "pinned" and refused["reason"] == "kernel-unavailable"
    assert broken["commit"] == bad and "specs/broken.yaml:" in broken["text"]
    assert all(item["kind"] == "ouro-controller-event" and item["at"] for item in hook.received)
    assert hook.paths == {"/hook?t=secret"} and hook.authorization == {"Bearer x"}
    lines = [json.loads(line) for line in received.read_text().splitlines()]
    assert [item["event"] for item in lines] == hook.events()  # the command got the same


def _started(state: Path, name: str, generation: int) -> float | None:
    """When the event log says ``name``'s ``generation`` started (time.time() scale)."""
    for item in events(state):
        if (item["event"], item.get("lineage"), item.get("generation")) == (
                "generation-started", name, generation):
            return datetime.fromisoformat(item["at"]).timestamp()
    return None


# A delivery that is retried 5 times waits 0.5 + 1 + 2 + 4 s between attempts, each
# attempt up to 10 s when the webhook hangs: had the pass waited for it, alpha's first
# generation would start after the last attempt. It starts before the attempt named here
# (the 5th of the 500s, 7.5 s after the first; the 2nd of the hang, 10.5 s after it).
@pytest.mark.parametrize(("status", "delay", "before_attempt"),
                         [(200, 60.0, 2), (500, 0.0, 5)], ids=["hangs", "answers-500"])
def test_a_dead_webhook_never_slows_generations(spec_repo: SpecRepo, state: Path,
                                                env: dict[str, str], status: int,
                                                delay: float, before_attempt: int) -> None:
    hook = Hook(status=status, delay=delay)
    spec_repo.commit("good", {"alpha.yaml": spec_text("alpha", 3)})
    spec_repo.commit("bad", {"broken.yaml": "kind: [\n"})  # a notification at once
    running = Running(spec_repo.bare, state, "--notify", hook.url, env=env)
    try:
        running.wait(lambda: running.lineage("alpha").get("generations") == 3,
                     "alpha's 3 generations")
        running.wait(lambda: hook.attempts >= before_attempt,
                     f"delivery attempt {before_attempt}", timeout=60)
        started = _started(state, "alpha", 1)
        assert started is not None, events(state)
        assert started < hook.times[before_attempt - 1], (
            "the first generation waited for the webhook", started, hook.times)
        if status == 200:
            assert hook.answered == 0  # still hanging while every generation ran
        else:
            assert hook.received == []
    finally:
        assert running.stop() == 0, running.output()
        hook.close()
