"""The public names of the plan layer are chosen; this test guards the lists."""

from __future__ import annotations

import dataclasses

import pytest

from reconciler import plan
from reconciler.plan import saved as planfile
from reconciler.report import render
from reconciler.state import observe, status


@pytest.mark.parametrize(
    ("module", "names"),
    [
        (observe, {"INTENT_MARKER", "GenerationCommit", "Interrupted", "Observed", "ReadProblem",
                   "observe", "observe_spec"}),
        (status, {"StatusReport", "read_status"}),
        (plan, {"ACTIONS", "REASONS", "Change", "LineagePlan", "ObservedState", "Plan",
                "PlanSpec", "Refusal", "changes_against", "desired_generations", "make_plan",
                "plan_lineage", "refusals"}),
        (planfile, {"MAX_PLAN_BYTES", "PLANFILE_FORMAT", "HeadsLike", "SavedLineage",
                    "SavedPlan", "check_fresh", "load_plan", "plan_file_document", "save_plan"}),
        (render, {"FORMAT_VERSION", "MARKERS", "StatusLine", "conditions_text",
                  "controller_lines", "plan_document", "plan_json",
                  "plan_markdown", "plan_text", "print_plan", "print_status",
                  "status_document", "status_json", "summary_line"}),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_public_names(module: object, names: set[str]) -> None:
    assert set(module.__all__) == names  # type: ignore[attr-defined]
    for name in names:
        assert hasattr(module, name)


def test_contract_fields() -> None:
    """The fields other parts (apply, verify, the JSON reports) rely on."""
    lineage_plan = {f.name for f in dataclasses.fields(plan.LineagePlan)}
    assert lineage_plan >= {"name", "action", "reason", "message", "observed_generations",
                            "desired_generations", "missing_generations", "max_spend_usd",
                            "changes", "heads"}
    observed = {f.name for f in dataclasses.fields(observe.Observed)}
    assert observed >= {"worktree_exists", "git_dir_exists", "observations_exist", "is_lineage",
                        "root_commit", "lineage_metadata", "observation_metadata",
                        "lineage_head", "observation_head", "generations",
                        "observed_generations", "last_observation", "dirty", "interrupted",
                        "problems"}
