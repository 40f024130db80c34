"""--max-spend-per-day: no generation starts once the day's recorded spend plus the next
generation's worst case would exceed it; said as a condition and a notification."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

import pytest

from tests.apply.helpers import REPO_ROOT
from tests.apply.test_model_failures import route
from tests.controller.harness import Hook, Running, SpecRepo, spec_text
from tests.fakes.provider_server import FakeProvider, chat_ok

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

VARIABLE = "OURO_CONTROLLER_TEST_KEY"


def test_the_guard_stops_at_the_threshold(spec_repo: SpecRepo, state: Path,
                                          env: dict[str, str]) -> None:
    # each generation spends $0.20 (10,000 output tokens at $20/Mtok); its worst case is
    # its budget, $0.50: with $1.00 a day, gens 1-3 start (0.40 + 0.50 <= 1.00), gen 4 not
    # (0.60 + 0.50 > 1.00)
    # the reply is the seed organism itself: every life asks the model again (and spends)
    seed = (REPO_ROOT / "reconciler" / "kernel" / "transaction" / "organism.el").read_text()
    reply = chat_ok(seed, prompt_tokens=10, completion_tokens=10_000)
    hook = Hook()
    with FakeProvider(route("openai-compatible", reply)) as fake:
        model = (f"name: local-model\nbase_url: {fake.url}/v1\nbudget_usd: \"0.50\"\n"
                 'price: {input_usd_per_mtok: "1", output_usd_per_mtok: "20"}\n'
                 f"api_key_env: {VARIABLE}\n")
        spec_repo.commit("paid", {"paid.yaml": spec_text("paid", 6, provider="openai-compatible",
                                                         extra=model)})
        running = Running(spec_repo.bare, state, "--max-spend-per-day", "1.00",
                          "--notify", hook.url, env={**env, VARIABLE: "sk-0123456789abcdef"})
        try:
            stalled = running.wait(
                lambda: running.condition("paid", "Stalled").get("reason") == "daily-budget"
                and running.condition("paid", "Stalled"), "the budget guard", timeout=180)
            time.sleep(5)  # more intervals: still nothing starts
            assert running.lineage("paid")["generations"] == 3
            running.wait(lambda: "budget-exhausted" in hook.events(), "its notification")
        finally:
            assert running.stop() == 0, running.output()
            hook.close()
    assert stalled["status"] == "True" and "--max-spend-per-day $1.00" in stalled["message"]
    budget = running.status()["controller"]["budget"]
    assert Decimal(budget["spent_usd"]) >= Decimal("0.60") and budget["blocked"]
    assert Decimal(budget["spent_usd"]) + Decimal("0.50") > Decimal("1.00")
    assert hook.events().count("budget-exhausted") == 1
    shares = [item["share"] for item in hook.received if item["event"] == "spend-threshold"]
    assert shares == ["0.5"]  # $0.60 crossed half the limit; 80 % and 100 % were never reached
