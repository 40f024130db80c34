"""The spec models: names, branches, defaults, prices, and the committed schema.json."""

from __future__ import annotations

import json
import re
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from reconciler.kernel.base import config as kc
from reconciler.report.schema import schema_text
from reconciler.spec import (
    CeilingsSpec,
    LineageSpec,
    ModelSpec,
    branch_name_problem,
    prices,
)

REPO = Path(__file__).resolve().parents[2]


def document(**model: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ouro/v1", "kind": "Lineage", "metadata": {"name": "x"},
        "spec": {"generations": 1, "model": model or {"provider": "echo"}},
    }


def errors(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        LineageSpec.model_validate(data)
    return [(".".join(map(str, e["loc"])), e["msg"]) for e in caught.value.errors()]


# --- names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a", True), ("gpt-03", True), ("0", True), ("a" * 63, True), ("a-b-c", True),
        ("a" * 64, False), ("-a", False), ("a-", False), ("A", False), ("a_b", False),
        ("a.b", False), ("", False), ("é", False), ("a b", False),
    ],
    ids=lambda v: repr(v),
)
def test_lineage_names_are_dns_labels(name: str, ok: bool) -> None:
    data = document()
    data["metadata"]["name"] = name
    if ok:
        assert LineageSpec.model_validate(data).name == name
    else:
        assert [loc for loc, _ in errors(data)] == ["metadata.name"]


# --- branches: our rules agree with git's -----------------------------------------------


BRANCHES = [
    ("lineage-x", None), ("observations/lineage-x", None), ("a/-b", None), ("ü", None),
    ("a@b", None), ("HEAD", "HEAD"), ("-x", "start with '-'"), ("a..b", "'..'"),
    ("a/.b", "start with '.'"), ("a.lock", ".lock"), ("a/b.lock/c", ".lock"), ("a/", "'/'"),
    ("/a", "'/'"), ("a//b", "'//'"), ("a.", "end with '.'"), ("a b", "' '"), ("a~", "'~'"),
    ("a^", "'^'"), ("a:b", "':'"), ("a?", "'?'"), ("a*", "'*'"), ("a[", "'['"),
    ("a\\b", "'\\\\'"), ("x@{y", "'@{'"), ("@", "'@'"), ("a\x01", "control"),
    ("a\x7f", "control"), ("", "empty"),
]


@pytest.mark.parametrize(("name", "fragment"), BRANCHES, ids=[repr(n) for n, _ in BRANCHES])
def test_branch_rules(name: str, fragment: str | None) -> None:
    problem = branch_name_problem(name)
    if fragment is None:
        assert problem is None
    else:
        assert problem is not None and fragment in problem


def _git_accepts(name: str) -> bool:
    result = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True)
    return result.returncode == 0


@pytest.mark.parametrize(("name", "fragment"), [b for b in BRANCHES if b[0] not in ("@", "")],
                         ids=[repr(n) for n, _ in BRANCHES if n not in ("@", "")])
def test_branch_table_agrees_with_git(name: str, fragment: str | None) -> None:
    assert _git_accepts(name) == (fragment is None)


@settings(max_examples=150, deadline=None)
@given(st.text(st.sampled_from("ab-./@{}~^:?*[\\ \x01lockHEAD"), min_size=1, max_size=12))
def test_branch_rules_agree_with_git_on_random_names(name: str) -> None:
    if name == "@" or "@{" in name:  # git --branch expands these (@{-1}, @ = HEAD); we refuse
        assert branch_name_problem(name) is not None
        return
    assert (branch_name_problem(name) is None) == _git_accepts(name), name


# --- defaults equal the kernel's (the original instrument's) ---------------------------


def test_ceilings_defaults_are_the_kernels() -> None:
    c = CeilingsSpec()
    k = kc.Ceilings()
    assert (c.wall, c.cpu, c.memory, c.swap, c.tasks, c.worktree, c.worktree_files, c.tmp,
            c.run, c.enforcement) == (
        k.wall_seconds, k.cpu_seconds, k.memory_bytes, k.swap_bytes, k.tasks, k.worktree_bytes,
        k.worktree_files, k.tmp_bytes, k.run_bytes, k.enforcement)
    assert c.memory == 1 << 30  # the original's MemoryMax=1G


def test_model_defaults_are_the_kernels() -> None:
    m = ModelSpec.model_validate({"provider": "echo"})
    k = kc.ModelConfig(provider="echo", name="echo")
    assert (m.max_output_tokens, m.max_prompt_bytes, m.request_timeout, m.budget_usd) == (
        k.max_output_tokens, k.max_prompt_bytes, k.request_timeout_seconds, k.budget_usd)


def test_provider_and_enforcement_lists_are_the_kernels() -> None:
    schema = json.loads(schema_text())["$defs"]
    # the kernel's providers, and the control plane's own `recorded` (a replay folder it fills)
    assert tuple(schema["ModelSpec"]["properties"]["provider"]["enum"]) == (*kc.PROVIDERS,
                                                                            "recorded")
    assert tuple(schema["CeilingsSpec"]["properties"]["enforcement"]["enum"]) == kc.ENFORCEMENTS


# --- providers and prices -------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "expected"),
    [
        ("anthropic", "claude-opus-4-8", ("5", "25")),
        ("anthropic", "claude-opus-4-7", ("5", "25")),
        ("anthropic", "claude-opus-4-6", ("5", "25")), ("openai", "gpt-5.6", ("5", "30")),
        ("openai", "gpt-5.6-sol", ("5", "30")), ("openai", "gpt-5.6-terra", ("2.50", "15")),
        ("openai", "gpt-5.6-luna", ("1", "6")), ("replay", "anything", ("0", "0")),
        ("anthropic", "claude-sonnet-4-6", ("3", "15")),
        ("anthropic", "claude-haiku-4-5", ("1", "5")),
        ("anthropic", "claude-haiku-4-5-20251001", ("1", "5")),
        ("openai", "gpt-5.4-mini", ("0.75", "4.50")), ("openai", "gpt-5.4-nano", ("0.20", "1.25")),
        ("openai", "gpt-5.5", ("5", "30")),
        ("echo", "echo", ("0", "0")), ("openai-compatible", "gpt-5.6", None),
        ("openai", "claude-opus-4-8", None), ("anthropic", "claude-9", None),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_known_prices(provider: str, model: str, expected: tuple[str, str] | None) -> None:
    price = prices.known_price(provider, model)
    if expected is None:
        assert price is None
    else:
        assert price == kc.Price(Decimal(expected[0]), Decimal(expected[1]))


def _documented_prices() -> list[tuple[str, str, kc.Price, str, str]]:
    """docs/spec.md's known-price rows: (provider, model, price, when, source) per model."""
    text = (REPO / "docs" / "spec.md").read_text()
    table = text[text.index("| provider | model | price | published / confirmed | source |"):]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        provider, models, price, when, source = (c.strip() for c in line.strip("|").split("|"))
        low, high = (Decimal(v.strip()) for v in price.split("/"))
        for model in models.split(","):
            rows.append((provider.strip("` "), model.strip("` "), kc.Price(low, high), when,
                         source))
    return rows


def test_every_known_price_is_documented_with_its_date_and_source() -> None:
    documented = {(p, m): (price, when, source)
                  for p, m, price, when, source in _documented_prices() if m != "any"}
    known = {(provider, model): price for provider, models in prices.KNOWN_PRICES.items()
             for model, price in models.items()}
    assert {k: v[0] for k, v in documented.items()} == known
    for (provider, model), (_, when, source) in documented.items():
        assert re.match(r"\d{4}-\d{2}-\d{2}", when), f"{provider} {model}: no date"
        assert source, f"{provider} {model}: no source"
    # the current families, not only the flagship: Opus, Sonnet, Haiku; GPT-5.x and its mini
    for family in ("claude-opus-", "claude-sonnet-", "claude-haiku-"):
        assert any(m.startswith(family) for m in prices.known_models("anthropic")), family
    assert {"gpt-5.4-mini", "gpt-5.6"} <= set(prices.known_models("openai"))


def test_an_unknown_model_keeps_its_clear_error() -> None:
    (found,) = errors(document(provider="anthropic", name="claude-sonnet-9"))
    assert found[0] == "spec.model.price"
    assert "model 'claude-sonnet-9' has no known price for provider anthropic" in found[1]
    assert "set price: " in found[1] and "claude-haiku-4-5" in found[1]


@pytest.mark.parametrize(
    ("model", "field", "fragment"),
    [
        ({"provider": "openai", "name": "gpt-5.6", "api_key_env": "1BAD"}, "api_key_env",
         "not an environment variable name"),
        ({"provider": "openai-compatible", "name": "m", "base_url": "ftp://host/v1",
          "price": {"input_usd_per_mtok": "0", "output_usd_per_mtok": "0"}}, "base_url",
         "not an http(s) URL"),
        ({"provider": "openai-compatible", "name": "m", "base_url": "http:///v1",
          "price": {"input_usd_per_mtok": "0", "output_usd_per_mtok": "0"}}, "base_url",
         "with a host"),
        ({"provider": "echo", "name": "\x00"}, "name", "printable"),
        ({"provider": "openai", "name": "gpt-5.6", "budget_usd": "0"}, "budget_usd",
         "more than 0"),
        ({"provider": "echo", "replay": "x"}, "replay", "only for provider replay"),
        ({"provider": "replay"}, "replay", "needs replay"),
        ({"provider": "gemini", "name": "g"}, "provider", "Input should be"),
        ({"provider": "echo", "base_url": "http://127.0.0.1/v1"}, "base_url",
         "reaches no server"),
        ({"provider": "openai", "name": "gpt-5.6", "base_url": "https://u:p@gw.example/v1"},
         "base_url", "no query, fragment or credentials"),
        ({"provider": "anthropic", "name": "claude-opus-4-8", "base_url": "http://h:port"},
         "base_url", "not a URL"),
        ({"provider": "anthropic", "name": "claude-opus-4-8", "store": True}, "store",
         "only for provider openai"),
        ({"provider": "echo", "max_failed_generations": 0}, "max_failed_generations",
         "greater than or equal to 1"),
    ],
    ids=["env-name", "url-scheme", "url-host", "name-control", "zero-budget", "replay-on-echo",
         "replay-missing", "unknown-provider", "base-url-on-echo", "url-credentials",
         "url-port", "store-on-anthropic", "no-failed-generations"],
)
def test_model_rules(model: dict[str, Any], field: str, fragment: str) -> None:
    found = errors(document(**model))
    assert any(loc == f"spec.model.{field}" and fragment in msg for loc, msg in found), found


@pytest.mark.parametrize(
    ("provider", "name", "url"),
    [("anthropic", "claude-opus-4-8", "https://gateway.example/anthropic/"),
     ("openai", "gpt-5.6", "http://127.0.0.1:4000/v1")],
    ids=["anthropic-gateway", "openai-proxy"],
)
def test_paid_providers_take_a_base_url(provider: str, name: str, url: str) -> None:
    spec = LineageSpec.model_validate(document(provider=provider, name=name, base_url=url))
    assert spec.spec.model.base_url == url.rstrip("/")
    assert spec.spec.model.store is None and spec.spec.model.max_failed_generations == 3


def test_offline_budget_may_be_zero() -> None:
    spec = LineageSpec.model_validate(document(provider="echo", budget_usd="0"))
    assert spec.spec.model.budget_usd == 0


@pytest.mark.parametrize(("cpu", "wall", "ok"), [(6, 600, True), (5, 600, False), (1, 100, True),
                                                 (1, 101, False), (600, 60, True)],
                         ids=["1pct", "below", "1of100", "1of101", "more-than-wall"])
def test_cpu_is_at_least_one_percent_of_wall(cpu: int, wall: int, ok: bool) -> None:
    if ok:
        assert CeilingsSpec.model_validate({"cpu": cpu, "wall": wall}).cpu == cpu
    else:
        with pytest.raises(ValidationError, match="at least 1%"):
            CeilingsSpec.model_validate({"cpu": cpu, "wall": wall})


def test_models_are_strict_and_closed() -> None:
    found = errors({**document(), "extra": 1})
    assert ("extra", "Extra inputs are not permitted") in found
    data = document()
    data["spec"]["generations"] = "5"
    assert [loc for loc, _ in errors(data)] == ["spec.generations"]
    data["spec"]["generations"] = True
    assert [loc for loc, _ in errors(data)] == ["spec.generations"]


# --- schema.json ----------------------------------------------------------------------


def test_schema_json_is_current() -> None:
    committed = (REPO / "schema.json").read_text(encoding="utf-8")
    assert committed == schema_text(), (
        "schema.json is stale: regenerate it with `ouro schema > schema.json` and commit it"
    )


def test_schema_is_stable_and_closed() -> None:
    assert schema_text() == schema_text()
    schema = json.loads(schema_text())
    assert schema["additionalProperties"] is False
    assert all(d.get("additionalProperties") is False for d in schema["$defs"].values())
    assert schema["properties"]["apiVersion"]["const"] == "ouro/v1"


# --- the reference documents every field ------------------------------------------------


def _fields(schema: dict[str, Any]) -> set[str]:
    names = set(schema["properties"])
    for definition in schema["$defs"].values():
        names |= set(definition["properties"])
    return names


def test_docs_spec_md_documents_every_field() -> None:
    text = (REPO / "docs" / "spec.md").read_text(encoding="utf-8")
    missing = sorted(f for f in _fields(json.loads(schema_text())) if f"`{f}`" not in text)
    assert not missing, f"docs/spec.md does not document: {missing}"
