"""Plan shows as `refuse` what apply would refuse before running anything, with no network.

The check is the kernel broker's own (``reconciler.state.preflight`` calls it), so
plan and apply cannot disagree; these tests run the real CLI in-process with every
socket connection made to fail, so that a network call would be seen.
"""

from __future__ import annotations

import json
import socket
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.cli import main
from reconciler.kernel.base.config import ModelConfig
from reconciler.state import instrument
from reconciler.state.preflight import api_key, provider_problem
from tests.observe.builder import LineageBuilder, lineage_paths
from tests.plan.helpers import spec_yaml, write_specs

KEY = "OURO_TEST_PREFLIGHT_KEY"
SECRET = "sk-preflight-secret-value"


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every connection attempt is recorded and fails."""
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("tests.plan.test_preflight: plan must not use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.delenv(KEY, raising=False)
    return attempts


def plan_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
              specs: Path) -> tuple[int, dict[str, dict[str, Any]], str]:
    monkeypatch.setattr(sys, "argv", ["ouro", "plan", str(specs), "--json"])
    code = 0
    try:
        main()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out = capsys.readouterr().out
    return code, {item["name"]: item for item in json.loads(out)["lineages"]}, out


def keyed(name: str, root: Path, generations: int = 2) -> str:
    return spec_yaml(name, lineage_paths(root, name), generations=generations,
                     extra_model=f"    api_key_env: {KEY}\n")


@pytest.mark.parametrize("flags", [(), ("--markdown",)], ids=["text", "markdown"])
def test_a_missing_key_is_a_refusal_in_every_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    no_network: list[Any], flags: tuple[str, ...],
) -> None:
    specs = write_specs(tmp_path / "specs", keyed("xi", tmp_path))
    monkeypatch.setattr(sys, "argv", ["ouro", "plan", str(specs), *flags])
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr().out
    assert exit_.value.code == 1
    assert "provider-config" in out and KEY in out
    assert no_network == []


def test_a_missing_key_refuses_a_create_and_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    no_network: list[Any],
) -> None:
    specs = write_specs(tmp_path / "specs", keyed("xi", tmp_path))
    code, by_name, _ = plan_json(monkeypatch, capsys, specs)
    item = by_name["xi"]
    assert (code, item["action"], item["reason"]) == (1, "refuse", "provider-config")
    assert [r["reason"] for r in item["reasons"]] == ["provider-config"]
    assert f"set {KEY}" in item["message"] and "fix spec.model" in item["message"]
    assert no_network == []
    assert not (tmp_path / "xi").exists() and not (tmp_path / "xi.git").exists()


def test_with_the_key_set_the_same_spec_is_a_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    no_network: list[Any],
) -> None:
    monkeypatch.setenv(KEY, SECRET)
    specs = write_specs(tmp_path / "specs", keyed("xi", tmp_path))
    code, by_name, out = plan_json(monkeypatch, capsys, specs)
    assert (code, by_name["xi"]["action"]) == (2, "create")
    assert SECRET not in out and no_network == []


def test_a_key_with_whitespace_is_refused_without_showing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY, f" {SECRET}\n")
    specs = write_specs(tmp_path / "specs", keyed("xi", tmp_path))
    code, by_name, out = plan_json(monkeypatch, capsys, specs)
    assert (code, by_name["xi"]["reason"]) == (1, "provider-config")
    assert "whitespace" in by_name["xi"]["message"]
    assert SECRET not in out


def test_a_lineage_with_nothing_to_run_needs_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    builder = LineageBuilder(tmp_path, "xi", identity=instrument.current())
    builder.gen()
    builder.gen()
    specs = write_specs(tmp_path / "specs", keyed("xi", tmp_path, generations=2))
    code, by_name, _ = plan_json(monkeypatch, capsys, specs)
    assert (code, by_name["xi"]["action"]) == (0, "in-sync")
    specs = write_specs(tmp_path / "specs", keyed("xi", tmp_path, generations=3))
    code, by_name, _ = plan_json(monkeypatch, capsys, specs)
    assert (code, by_name["xi"]["action"], by_name["xi"]["reason"]) == (
        1, "refuse", "provider-config")
    assert by_name["xi"]["observed_generations"] == 2


@pytest.mark.parametrize(
    ("model", "environ", "words"),
    [
        (ModelConfig("openai", "gpt", api_key_env=KEY, budget_usd=Decimal(1)), {},
         f"set {KEY}"),
        (ModelConfig("openai", "gpt", api_key_env=KEY, budget_usd=Decimal(1)),
         {KEY: "a\tb"}, "whitespace or control characters"),
        (ModelConfig("echo", "echo"), {}, None),
        (ModelConfig("openai", "gpt", api_key_env=KEY, budget_usd=Decimal(1)), {KEY: "k"},
         None),
        (ModelConfig("openai-compatible", "m", api_key_env=KEY, base_url="http://127.0.0.1:9/v1",
                     budget_usd=Decimal(1)), {},
         f"api_key_env names {KEY}, which is not set here, so no key would be sent: set "
         f"{KEY}, or write `api_key_env: null` for a server that takes no key"),
        (ModelConfig("openai-compatible", "m", api_key_env=KEY, base_url="http://127.0.0.1:9/v1",
                     budget_usd=Decimal(1)), {KEY: ""}, f"{KEY}, which is empty here"),
        (ModelConfig("openai-compatible", "m", api_key_env=None, base_url="http://127.0.0.1:9/v1",
                     budget_usd=Decimal(1)), {}, None),
        (ModelConfig("openai-compatible", "m", api_key_env=KEY, base_url="http://127.0.0.1:9/v1",
                     budget_usd=Decimal(1)), {KEY: "k"}, None),
    ],
    ids=["unset", "control-character", "offline", "set", "compatible-unset", "compatible-empty",
         "compatible-keyless", "compatible-set"],
)
def test_provider_problem(model: ModelConfig, environ: dict[str, str],
                          words: str | None) -> None:
    problem = provider_problem(model, environ)
    assert (problem is None) == (words is None)
    if words is not None:
        assert problem is not None and words in problem and not problem.startswith("kernel:")
    assert api_key(model, environ) == environ.get(KEY)
