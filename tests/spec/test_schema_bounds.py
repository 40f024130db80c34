"""schema.json refuses what `ouro validate` refuses: both are fed the same cases.

Each case is one field set on a valid document; the verdict of the spec models (what
the loader runs) and of schema.json (what an editor runs) must agree. Known gaps a
JSON Schema cannot state: ``cpu`` at least 1% of ``wall`` (a relation between two
fields) and a unit string beyond the field's maximum (``99999999T``).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from pydantic import ValidationError

from reconciler.spec import LineageSpec, branch_name_problem, units

REPO = Path(__file__).resolve().parents[2]
VALIDATOR = jsonschema.Draft202012Validator(
    json.loads((REPO / "schema.json").read_text(encoding="utf-8")))
BASE: dict[str, Any] = {
    "apiVersion": "ouro/v1",
    "kind": "Lineage",
    "metadata": {"name": "s"},
    "spec": {"generations": 1, "model": {"provider": "echo"}},
}
OPENAI = {"provider": "openai", "name": "gpt-5.6"}
COMPATIBLE = {"provider": "openai-compatible", "name": "m",
              "price": {"input_usd_per_mtok": "0", "output_usd_per_mtok": "0"}}


def _with(path: str, value: Any, model: dict[str, Any] | None = None) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    if model is not None:
        document["spec"]["model"] = dict(model)
    *parents, last = path.split(".")
    target = document
    for key in parents:
        target = target.setdefault(key, {})
    target[last] = value
    return document


SIZES = [0, "0", "0M", "00", "1", "1K", "0_1K", "1__0", -1, "1KB", "1k", 2**63, 2**63 - 1,
         "512MiB", " 2 G ", "1.5G", True]
DURATIONS = [0, "0", "0s", "0m0s", "0m1s", "1s", "10m", "1h30m", "1ms", "1 h", 31622401,
             31622400, "-1s", "2d", " 5 ", "5sec", "5mins"]
BRANCHES = ["", "@", "HEAD", "-x", "/x", "x/", "x.", "a..b", "a@{b", "a b", "a~b", "a^b",
            "a:b", "a?b", "a*b", "a[b", "a\\b", "a//b", ".a", "a/.b", "a.lock", "a.lock/b",
            "a\x01b", "a\x7fb", "lineage-x", "feature/x", "a.b", "a@b", "HEADS", "x.lockx",
            "@x", "é"]
CASES: list[tuple[str, Any, dict[str, Any] | None]] = [
    *(("spec.ceilings.memory", v, None) for v in SIZES),
    *(("spec.ceilings.swap", v, None) for v in [0, "0", "0K", -1]),
    *(("spec.ceilings.worktree", v, None) for v in [0, "0M", "1M"]),
    *(("spec.model.max_prompt_bytes", v, None) for v in [0, "0", "1K"]),
    *(("spec.ceilings.wall", v, None) for v in DURATIONS),
    *(("spec.model.request_timeout", v, None) for v in [0, "0s", "1s", 31622401]),
    *(("spec.ceilings.tasks", v, None) for v in [0, 1, 4194304, 4194305, "64"]),
    *(("spec.ceilings.worktree_files", v, None) for v in [0, 1]),
    *(("spec.generations", v, None) for v in [-1, 0, 1_000_000, 1_000_001]),
    *(("spec.model.max_output_tokens", v, None) for v in [0, 1, 10**9 + 1]),
    *(("spec.storage.branch", v, None) for v in BRANCHES),
    *(("spec.storage.observation_branch", v, None) for v in ["observations/x", "x..y", None]),
    *(("metadata.labels", {k: "v"}, None) for k in ["team", "a/b.c_d-e", "-bad", "bad-",
                                                     "a" * 63, "a" * 64, "a b", "é"]),
    ("metadata.labels", {"team": 1}, None),
    *(("spec.model.name", v, OPENAI) for v in ["", " ", "gpt\n", "x" * 200, "x" * 201,
                                                "gpt-5.6"]),
    *(("spec.model.api_key_env", v, OPENAI) for v in ["1BAD", "GOOD_1", "A-B", "_X"]),
    *(("spec.model.base_url", v, COMPATIBLE) for v in [
        "ftp://x", "http://", "http://127.0.0.1:11434/v1", "https://h", "http://[::1]:8000/v1",
        "http://a b", "HTTP://host/", "http://user@host/v1", "http:///v1", "http://h/v1?x=1",
        "http://h/#f", "http://h:port/v1"]),
    *(("spec.model.budget_usd", v, OPENAI) for v in ["0", "0.00", "0.01", 0, 1, "1.00"]),
    *(("spec.model.budget_usd", v, None) for v in ["0", 0, "-1", "1e3"]),
    *(("spec.storage.path", v, None) for v in ["", " ", "x", "a\x00b", "~/x"]),
    *(("spec.instrument.commit", v, None) for v in ["a" * 40, "A" * 64, "a" * 39, " " + "a" * 40]),
]


def _models_accept(document: dict[str, Any]) -> bool:
    try:
        LineageSpec.model_validate(document)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(("path", "value", "model"), CASES,
                         ids=[f"{p.split('.')[-1]}={v!r}"[:60] for p, v, _ in CASES])
def test_schema_and_validator_agree(path: str, value: Any, model: dict[str, Any] | None) -> None:
    document = _with(path, value, model)
    ouro = _models_accept(document)
    editor = not list(VALIDATOR.iter_errors(document))
    assert editor == ouro, (
        f"{path}={value!r}: ouro validate {'accepts' if ouro else 'refuses'}, schema.json "
        f"{'accepts' if editor else 'refuses'}")


def test_the_cases_include_both_verdicts_for_each_rule() -> None:
    verdicts: dict[str, set[bool]] = {}
    for path, value, model in CASES:
        verdicts.setdefault(path, set()).add(_models_accept(_with(path, value, model)))
    one_sided = [p for p, v in verdicts.items() if len(v) < 2 and p != "metadata.labels"]
    assert not one_sided, f"cases that cannot show a disagreement: {one_sided}"


@pytest.mark.parametrize("name", BRANCHES)
def test_the_branch_schema_is_branch_name_problem(name: str) -> None:
    schema = json.loads((REPO / "schema.json").read_text())["$defs"]["StorageSpec"][
        "properties"]["branch"]
    assert jsonschema.Draft202012Validator(schema).is_valid(name) == (
        branch_name_problem(name) is None)


@pytest.mark.parametrize(("pattern", "parse"), [
    (units.POSITIVE_SIZE_PATTERN, units.parse_size),
    (units.POSITIVE_DURATION_PATTERN, units.parse_duration),
    (units.POSITIVE_MONEY_PATTERN, units.parse_money),
], ids=["size", "duration", "money"])
def test_positive_patterns_are_the_parsers_above_zero(pattern: str, parse: Any) -> None:
    for text in ["0", "00", "0_0", "1", "01", "0_1", "1_", "1K", "0K", "10MiB", " 5 G ",
                 "0s", "0m0s", "0m1s", "1m", "10m0s", "1h30m", "1ms", "0.00", "0.01",
                 "1.00", "0.", ".5", "00.10", "1__0", "_1", "0 h 0 m"]:
        try:
            above_zero = parse(text) > 0
        except ValueError:
            above_zero = False
        assert bool(re.search(pattern, text)) == above_zero, text
