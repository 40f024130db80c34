"""`provider: recorded`'s spec rules, table-driven: `lineage` is required there and only
there, it is a lineage's name, and a recorded model takes no server, key or price."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from reconciler.spec import LineageSpec
from reconciler.spec.load import load_specs


def _errors(model: dict[str, Any]) -> list[tuple[str, str]]:
    data = {"apiVersion": "ouro/v1", "kind": "Lineage", "metadata": {"name": "x"},
            "spec": {"generations": 1, "model": model}}
    with pytest.raises(ValidationError) as caught:
        LineageSpec.model_validate(data)
    return [(".".join(map(str, e["loc"])), e["msg"]) for e in caught.value.errors()]


@pytest.mark.parametrize(
    ("model", "field", "fragment"),
    [({"provider": "recorded"}, "lineage", "provider recorded needs lineage"),
     ({"provider": "echo", "lineage": "scribe"}, "lineage", "only for provider recorded"),
     ({"provider": "recorded", "lineage": "Scribe!"}, "lineage", "is not a lineage name"),
     ({"provider": "recorded", "lineage": "s", "price": {"input_usd_per_mtok": "1",
                                                         "output_usd_per_mtok": "1"}},
      "price", "costs nothing"),
     ({"provider": "recorded", "lineage": "s", "api_key_env": "K"}, "api_key_env",
      "uses no API key"),
     ({"provider": "recorded", "lineage": "s", "base_url": "http://127.0.0.1:1/v1"},
      "base_url", "reaches no server")],
    ids=["lineage-missing", "lineage-on-echo", "lineage-not-a-name", "price", "key", "url"],
)
def test_recorded_rules(model: dict[str, Any], field: str, fragment: str) -> None:
    found = _errors(model)
    assert any(loc == f"spec.model.{field}" and fragment in msg for loc, msg in found), found


def test_a_recorded_model_is_the_kernels_replay_of_its_folder(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(
        "apiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: x}\nspec:\n  generations: 1\n"
        "  model: {provider: recorded, lineage: scribe, budget_usd: '0'}\n")
    spec = load_specs([tmp_path / "x.yaml"], state_dir=tmp_path / "state")[0]
    model = spec.model()
    assert (model.provider, model.name, model.replay_dir) == (
        "replay", "recorded", tmp_path / "state" / ".recorded" / "x")
