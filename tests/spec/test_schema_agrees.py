"""schema.json tells editors the same story as the loader: shipped specs pass, mistakes fail."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
SHIPPED = sorted([*(REPO / "specs").glob("*.yaml"), *(REPO / "examples").glob("*.yaml")])

BASE: dict[str, Any] = {
    "apiVersion": "ouro/v1",
    "kind": "Lineage",
    "metadata": {"name": "s"},
    "spec": {"generations": 1, "model": {"provider": "openai", "name": "gpt-5.6"}},
}


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", SHIPPED, ids=[f"{p.parent.name}/{p.name}" for p in SHIPPED])
def test_shipped_specs_pass_the_schema(path: Path) -> None:
    documents = [d for d in YAML(typ="safe", pure=True).load_all(path.read_text()) if d]
    assert documents
    for document in documents:
        assert not list(VALIDATOR.iter_errors(document)), path


def _with(path: str, value: Any) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    target = document
    for key in parents:
        target = target.setdefault(key, {})
    target[last] = value
    return document


@pytest.mark.parametrize(
    ("document", "valid"),
    [
        (BASE, True),
        (_with("spec.model.name", "gpt-5.6-terra"), True),
        (_with("spec.model.name", "gpt-9"), False),  # unknown model, no price
        (_with("spec.model.price", {"input_usd_per_mtok": "1", "output_usd_per_mtok": "2"}),
         True),
        (_with("spec.model.price", {"input_usd_per_mtok": 1.5, "output_usd_per_mtok": "2"}),
         False),
        (_with("spec.model.base_url", "http://127.0.0.1/v1"), True),
        (_with("spec.model", {"provider": "echo", "base_url": "http://127.0.0.1/v1"}), False),
        (_with("spec.model.store", True), True),
        (_with("spec.model", {"provider": "echo", "store": False}), False),
        (_with("spec.model.max_failed_generations", 0), False),
        (_with("spec.model", {"provider": "openai-compatible", "name": "m"}), False),
        (_with("spec.model", {"provider": "openai-compatible", "name": "m",
                              "base_url": "http://127.0.0.1:11434/v1",
                              "price": {"input_usd_per_mtok": "0",
                                        "output_usd_per_mtok": "0"}}), True),
        (_with("spec.model", {"provider": "echo"}), True),
        (_with("spec.model", {"provider": "echo", "api_key_env": "K"}), False),
        (_with("spec.model", {"provider": "replay"}), False),
        (_with("spec.model", {"provider": "replay", "replay": "r"}), True),
        (_with("spec.ceilings", {"memory": "1GB"}), False),
        (_with("spec.ceilings", {"memory": "1GiB", "wall": "10m", "cpu": "1h30m"}), True),
        (_with("spec.generatons", 3), False),
        (_with("metadata.name", "Bad_Name"), False),
        (_with("apiVersion", "ouro/v2"), False),
        (_with("spec.instrument", {"commit": "abc"}), False),
        (_with("spec.instrument", {"commit": "a" * 40}), True),
    ],
    ids=["base", "known-model", "unpriced-model", "explicit-price", "float-price",
         "base-url-on-openai", "base-url-on-echo", "store-on-openai", "store-on-echo",
         "no-failed-generations", "compatible-without-base-url", "compatible-complete", "echo",
         "echo-with-key", "replay-without-folder", "replay", "ambiguous-size", "units",
         "typo", "bad-name", "api-version", "short-commit", "full-commit"],
)
def test_schema_verdicts(document: dict[str, Any], valid: bool) -> None:
    assert (not list(VALIDATOR.iter_errors(document))) == valid
