"""The planner makes the constraints manifest once per distinct ceilings and model (a
fleet's specs share a few), and never hands one spec another's: two models equal as
values but shown differently (a budget of 1.0 and of 1.00) each get their own."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pytest

from reconciler.kernel.base.config import Ceilings, ModelConfig, constraints_manifest
from reconciler.plan import planner


@dataclass(frozen=True)
class _Spec:
    budget: str
    wall: int = 600

    def model(self) -> ModelConfig:
        return ModelConfig(provider="echo", name="echo", budget_usd=Decimal(self.budget))

    def ceilings(self) -> Ceilings:
        return Ceilings(wall_seconds=self.wall)


def _ran_under(spec: _Spec) -> dict[str, object]:
    return {"provider": "echo", "model": "echo",
            "constraints": constraints_manifest(spec.ceilings(), spec.model())}


def test_each_spec_is_compared_with_its_own_manifest() -> None:
    planner._MANIFESTS.clear()
    shown, equal = _Spec("1.00"), _Spec("1.0")
    assert shown.model() == equal.model()  # equal values, shown differently
    assert planner.changes_against(shown, _ran_under(shown)) == ()
    assert planner.changes_against(equal, _ran_under(equal)) == ()  # not 1.00's manifest
    (change,) = planner.changes_against(equal, _ran_under(shown))
    assert (change.field, change.observed, change.desired) == (
        "constraints.model.spending_budget.amount", "1.00", "1.0")
    changes = planner.changes_against(_Spec("1.00", wall=60), _ran_under(shown))
    assert ("constraints.generation.wall_seconds", 600, 60) in [
        (c.field, c.observed, c.desired) for c in changes]


def test_a_manifest_is_made_once_per_ceilings_and_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    planner._MANIFESTS.clear()
    made: list[object] = []
    real = planner.constraints_manifest

    def counting(ceilings: Ceilings, model: ModelConfig) -> dict[str, object]:
        made.append((ceilings, model))
        return real(ceilings, model)

    ran = _ran_under(_Spec("1.00"))
    monkeypatch.setattr(planner, "constraints_manifest", counting)
    for _ in range(50):
        planner.changes_against(_Spec("1.00"), ran)
    planner.changes_against(_Spec("2.00"), ran)
    assert len(made) == 2
