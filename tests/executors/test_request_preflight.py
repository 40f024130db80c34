"""A node runs a lineage through the fleet, as a local apply does: the provider preflight
refuses a lineage whose model could not be served there, before anything is created."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reconciler.engine.executors.request import LineageRequest, run_request
from reconciler.spec.load import load_specs
from reconciler.state import instrument

KEY = "OURO_TEST_NODE_PREFLIGHT_KEY"
SPEC = f"""apiVersion: ouro/v1
kind: Lineage
metadata:
  name: keyless
spec:
  generations: 1
  model:
    provider: openai-compatible
    name: m
    base_url: http://127.0.0.1:9/v1
    api_key_env: {KEY}
    budget_usd: "0.01"
    price: {{input_usd_per_mtok: "1", output_usd_per_mtok: "1"}}
  ceilings:
    wall: 60s
    cpu: 30s
    memory: 512MiB
"""


def test_a_node_refuses_a_model_it_could_not_serve_before_creating_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY, raising=False)
    spec_file = tmp_path / "keyless.yaml"
    spec_file.write_text(SPEC)
    state = tmp_path / "state"
    (spec,) = load_specs([spec_file], state_dir=state)
    request = LineageRequest(
        name="keyless", spec_file=str(spec_file), spec_sha256=spec.sha256,
        state_dir=str(state), identity=dataclasses.asdict(instrument.current()),
        lock_timeout=5.0)
    document = run_request(request)
    result = document["result"]
    # planned as the local apply plans it (with the preflight), not as a birth
    assert result["planned_action"] == "refuse", result
    assert result["final_action"] == "refuse", result
    assert KEY in (result["refusal"] or ""), result
    assert result["generations_run"] == 0
    assert not (state / "keyless").exists() and not (state / "keyless.git").exists()
