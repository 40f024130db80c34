"""The entry seam carries issue 14's additions without breaking kernels from before them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reconciler.engine.pinned import request_json
from reconciler.kernel import entry
from reconciler.kernel.base.config import Ceilings, LineagePaths, ModelConfig

PATHS = LineagePaths(Path("/l"), Path("/l.git"), Path("/l.obs"), "lineage-l",
                     "observations/lineage-l")


def _request(model: ModelConfig) -> dict[str, object]:
    return request_json("generation", paths=PATHS, model=model, ceilings=Ceilings(),
                        api_key=None)


def test_a_default_store_is_not_sent_so_older_kernels_accept_the_model() -> None:
    sent = _request(ModelConfig(provider="echo", name="echo"))["model"]
    assert isinstance(sent, dict) and "store" not in sent
    asked = _request(ModelConfig(provider="openai", name="m", store=True))["model"]
    assert isinstance(asked, dict) and asked["store"] is True


@pytest.mark.parametrize(("value", "ok"), [(True, True), (False, True), ("yes", False)],
                         ids=["true", "false", "text"])
def test_the_entry_reads_store_as_a_boolean(value: object, ok: bool) -> None:
    model = dataclasses.asdict(ModelConfig(provider="openai", name="m"))
    model.update(price={k: str(v) for k, v in model["price"].items()},
                 budget_usd=str(model["budget_usd"]), store=value)
    if ok:
        assert entry._model(model).store is value
    else:
        with pytest.raises(entry.RequestError, match="store"):
            entry._model(model)


def test_the_outcome_carries_the_failure_fields() -> None:
    assert entry.OUTCOME_FIELDS[-2:] == ("provider_failure", "usage_exceeds_request")
