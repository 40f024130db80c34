"""Ctrl-C in a fleet (issue 21): with 16 lineages' generations in flight at once, each
waiting on a slow loopback model, the first SIGINT to `ouro apply --parallel 16` lets every
running generation finish and publish, starts no new one, and exits 130 with every
lineage consistent. (bench/fleet_scale.py measures the same at hundreds.)"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.apply.helpers import assert_invariant, observation_numbers, ouro_argv, write_spec
from tests.fakes.provider_server import FakeProvider, Reply, Seen, chat_ok, openai_models
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

LINEAGES = 16
MODEL_DELAY_S = 12.0  # long enough that every lineage is inside its first generation at once
BODY = '(message "quiet life")\n'


def _events(state: Path) -> list[dict[str, Any]]:
    path = state / "events.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _kinds(state: Path, kind: str) -> list[dict[str, Any]]:
    return [event for event in _events(state) if event.get("event") == kind]


def test_first_interrupt_finishes_every_running_generation_of_a_fleet(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    slow = dataclasses.replace(chat_ok(BODY), delay=MODEL_DELAY_S)

    def answer(seen: Seen, number: int) -> Reply:
        del number
        return openai_models() if seen.method == "GET" else slow

    state = tmp_path / "state"
    with FakeProvider(answer, backlog=64) as fake:
        for index in range(LINEAGES):
            write_spec(specs, f"f{index}", 3, provider="openai-compatible", extra_model=(
                f"name: local-model\nbase_url: {fake.url}/v1\napi_key_env: null\n"
                'budget_usd: "0.50"\nprice: {input_usd_per_mtok: "1", output_usd_per_mtok: "2"}'))
        process = subprocess.Popen(
            ouro_argv("apply", "--yes", "--json", "--parallel", str(LINEAGES), str(specs)),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while len(fake.requests) < LINEAGES + 1:  # the probe and every lineage's first call
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, f"{len(fake.requests)} calls in 240 s"
            time.sleep(0.05)
        process.send_signal(2)  # SIGINT, as Ctrl-C in a terminal
        out, err = process.communicate(timeout=300)
        calls = len(fake.requests)
    assert process.returncode == 130, err[-2000:]
    document = json.loads(out)
    assert document["interrupted"] is True
    assert calls == LINEAGES + 1  # no generation started after the interrupt
    started, finished = _kinds(state, "generation-started"), _kinds(state, "generation")
    assert len(started) == len(finished) == LINEAGES, (len(started), len(finished))
    assert not _kinds(state, "generation-cancelled")
    for item in document["lineages"]:
        assert item["generations_run"] == 1 and not item["errors"], item
        paths = lineage_paths(state, item["name"])
        assert observation_numbers(paths) == [1]
        assert_invariant(paths, 1)
