"""One apply observes and plans each lineage as few times as correctness allows.

Counted in-process, with the kernel's real transaction over a fake sandbox
(``tests.kernel_generation.helpers.Fake``): once to show the plan, once again
under the lineage's lock (another apply may have moved it meanwhile), and once
at the end only if something was written (after a recovery, once more).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine import session
from reconciler.engine.fleet import Fleet
from reconciler.kernel.transaction import generation
from reconciler.plan import Plan, planner
from reconciler.report.progress import SilentReporter
from tests.apply.helpers import write_spec
from tests.kernel_generation.helpers import Fake


class _Yes:
    def show_plan(self, plan: Plan) -> None:
        del plan

    def confirm(self, worst_usd: Decimal) -> bool:
        del worst_usd
        return True


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()

    def counting(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return function(*args, **kwargs)
        return wrapper

    # every observation and every plan of a lineage goes through the fleet
    monkeypatch.setattr(Fleet, "observe", counting("observe", Fleet.observe))
    monkeypatch.setattr(planner, "plan_lineage", counting("plan", planner.plan_lineage))
    monkeypatch.setattr(generation, "real_runtime", Fake().runtime)
    return counts


def _apply(specs: Path) -> session.ApplyOutcome:
    return session.apply(session.ApplyRequest(paths=(specs,)), _Yes(), SilentReporter())


def test_a_new_lineage_is_observed_three_times_whatever_its_generations(
    tmp_path: Path, counted: Counter[str]
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "solo", 3)
    outcome = _apply(specs)
    (result,) = outcome.lineages
    assert (outcome.exit_code, result.generations_run, result.final_action) == (0, 3, "in-sync")
    # shown, under the lock, at the end: not once per generation
    assert counted == {"observe": 3, "plan": 3}

    counted.clear()
    write_spec(specs, "solo", 5)
    outcome = _apply(specs)
    assert outcome.lineages[0].generations_run == 2
    assert counted == {"observe": 3, "plan": 3}

    counted.clear()
    outcome = _apply(specs)  # in sync: shown, and nothing is run or looked at again
    assert (outcome.exit_code, outcome.lineages[0].final_action) == (0, "in-sync")
    assert counted == {"observe": 1, "plan": 1}


def test_a_refused_lineage_is_not_observed_again_after_its_refusal(
    tmp_path: Path, counted: Counter[str]
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "broken", 2)
    (tmp_path / "state" / "broken").mkdir(parents=True)  # a worktree with no git dir
    (tmp_path / "state" / "broken" / "stray.txt").write_text("not a lineage\n")
    outcome = _apply(specs)
    (result,) = outcome.lineages
    assert result.final_action == "refuse" and outcome.exit_code == 1
    # shown, then re-planned under the lock (a refusal may be another apply's work)
    assert counted == {"observe": 2, "plan": 2}
