"""The planner over real repositories, through the real spec loader."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.kernel.base.config import LineagePaths
from reconciler.plan import LineagePlan, make_plan, plan_lineage
from reconciler.spec.load import load_specs
from reconciler.state import instrument
from reconciler.state.observe import observe
from tests.observe.builder import LineageBuilder, lineage_paths
from tests.plan.helpers import spec_yaml, write_specs


def _plan_one(tmp_path: Path, paths: LineagePaths, generations: int, **spec: str) -> LineagePlan:
    file = write_specs(tmp_path / "specs", spec_yaml("x", paths, generations=generations,
                                                     **spec))
    (loaded,) = load_specs([file])
    return plan_lineage(loaded, observe(loaded.paths()), instrument.current())


def _builder(tmp_path: Path, **kwargs: object) -> LineageBuilder:
    return LineageBuilder(tmp_path, "x", identity=instrument.current(), **kwargs)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[LineageBuilder], None]
    desired: int
    action: str
    reason: str | None = None
    observed: int | None = None


def _n(count: int) -> Callable[[LineageBuilder], None]:
    def build(b: LineageBuilder) -> None:
        for _ in range(count):
            b.gen()
    return build


def _drop_last_observation(b: LineageBuilder) -> None:
    _n(3)(b)
    b.drop_observation(3)


def _foreign_record(b: LineageBuilder) -> None:
    b.gen(observe=False)
    b.observe(1, "ab" * 20)


def _crash_after_observation(b: LineageBuilder) -> None:
    b.gen()
    b.gen(move_branch=False)


def _crash_before_observation(b: LineageBuilder) -> None:
    b.gen()
    b.write_marker(phase="running")


def _observations_gone(b: LineageBuilder) -> None:
    b.gen()
    shutil.rmtree(b.paths.observations)


def _metadata_of_other_lineage(b: LineageBuilder) -> None:
    b.set_observation_metadata(seed_sha256="1" * 64)


CASES = [
    Case("extend", _n(2), 5, "extend", observed=2),
    Case("in-sync", _n(2), 2, "in-sync", observed=2),
    Case("ahead", _n(2), 1, "ahead", observed=2),
    Case("recover-roll-forward", _crash_after_observation, 3, "recover", observed=1),
    Case("recover-discard", _crash_before_observation, 3, "recover", observed=1),
    Case("commits-and-observations-disagree", _drop_last_observation, 5, "refuse",
         "unbalanced", observed=3),
    Case("observation-names-foreign-commit", _foreign_record, 5, "refuse",
         "observation-disagrees", observed=1),
    Case("observation-metadata-of-another-lineage", _metadata_of_other_lineage, 5, "refuse",
         "observation-disagrees"),
    Case("observation-repo-gone", _observations_gone, 5, "refuse", "partial-paths", observed=1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_plan_real_lineage(tmp_path: Path, case: Case) -> None:
    builder = _builder(tmp_path)
    case.build(builder)
    result = _plan_one(tmp_path, builder.paths, case.desired)
    assert (result.action, result.reason) == (case.action, case.reason), result.message
    if case.observed is not None:
        assert result.observed_generations == case.observed


def test_nothing_there_is_create(tmp_path: Path) -> None:
    result = _plan_one(tmp_path, lineage_paths(tmp_path, "x"), 4, budget="0.25")
    assert (result.action, result.missing_generations, str(result.max_spend_usd)) == (
        "create", 4, "1.00")


def test_lineage_born_by_the_kernel_plans_as_extend(tmp_path: Path) -> None:
    from reconciler.kernel.transaction import lineage
    paths = lineage_paths(tmp_path, "x")
    lineage.init_lineage(paths, instrument.current())
    result = _plan_one(tmp_path, paths, 2)
    assert (result.action, result.observed_generations, result.missing_generations) == (
        "extend", 0, 2)


def test_born_by_another_instrument(tmp_path: Path) -> None:
    from reconciler.kernel.base.config import Identity

    other = Identity("https://example.invalid/x.git", "main", "9" * 40, "8" * 64)
    builder = LineageBuilder(tmp_path, "x", identity=other)
    builder.gen()
    result = _plan_one(tmp_path, builder.paths, 3)
    assert (result.action, result.reason) == ("refuse", "instrument-commit-drift")
    assert "9" * 12 in result.message


def test_spec_pin_mismatch(tmp_path: Path) -> None:
    builder = _builder(tmp_path)
    result = _plan_one(tmp_path, builder.paths, 3, pin="7" * 40)
    assert (result.action, result.reason) == ("refuse", "spec-pin-mismatch")


def test_spec_names_another_branch(tmp_path: Path) -> None:
    builder = _builder(tmp_path)
    builder.gen()
    paths = LineagePaths(builder.paths.worktree, builder.paths.git_dir,
                         builder.paths.observations, "lineage-other",
                         builder.paths.observation_branch)
    result = _plan_one(tmp_path, paths, 3)
    assert (result.action, result.reason) == ("refuse", "branch-mismatch")


def test_places_hold_something_else(tmp_path: Path) -> None:
    paths = lineage_paths(tmp_path, "x")
    for place in (paths.worktree, paths.git_dir, paths.observations):
        place.mkdir()
        (place / "file.txt").write_text("not git\n", encoding="utf-8")
    result = _plan_one(tmp_path, paths, 3)
    assert (result.action, result.reason) == ("refuse", "not-a-lineage")


def test_sample_bundle_is_refused_no_metadata(tmp_path: Path, sample_lineage: Path) -> None:
    paths = LineagePaths(sample_lineage, sample_lineage / ".git",
                         sample_lineage.with_name("sample.observations"), "main",
                         "observations/main")
    result = _plan_one(tmp_path, paths, 10)
    assert (result.action, result.reason, result.observed_generations) == (
        "refuse", "no-metadata", 5)


def _fixture_paths(worktree: Path) -> LineagePaths:
    return LineagePaths(worktree, worktree.with_name("fixture.git"),
                        worktree.with_name("fixture.observations"), "lineage-fixture",
                        "observations/lineage-fixture")


def test_original_fixture_is_refused_as_foreign(tmp_path: Path, original_lineage: Path) -> None:
    result = _plan_one(tmp_path, _fixture_paths(original_lineage), 10,
                       provider="openai", model="gpt-5.6")
    assert (result.action, result.reason) == ("refuse", "instrument-commit-drift")
    assert result.observed_generations == 5
    assert "0b8df4c1442a" in result.message and "start a new lineage" in result.message
    assert result.changes == ()  # same provider, model and default ceilings as observed


def test_original_fixture_at_its_commit_is_fingerprint_drift(
    tmp_path: Path, original_lineage: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OURO_INSTRUMENT_COMMIT", "0b8df4c1442a055ec918cca8054cdf01f7b4ac33")
    result = _plan_one(tmp_path, _fixture_paths(original_lineage), 10,
                       provider="openai", model="gpt-5.6")
    assert (result.action, result.reason) == ("refuse", "fingerprint-drift")


def test_changes_from_the_last_observation(tmp_path: Path, original_lineage: Path) -> None:
    result = _plan_one(tmp_path, _fixture_paths(original_lineage), 10, provider="openai",
                       model="gpt-5.6-luna", budget="2.00")
    assert [c.field for c in result.changes] == [
        "model", "constraints.model.spending_budget.amount"]


def test_many_lineages_in_one_plan(tmp_path: Path) -> None:
    documents = []
    for index in range(3):
        builder = LineageBuilder(tmp_path, f"l{index}", identity=instrument.current())
        for _ in range(index):
            builder.gen()
        documents.append(spec_yaml(f"l{index}", builder.paths, generations=2))
    (loaded := load_specs([write_specs(tmp_path / "specs", *documents)]))
    plan = make_plan([(s, observe(s.paths())) for s in loaded], instrument.current())
    assert [p.action for p in plan.lineages] == ["extend", "extend", "in-sync"]
    assert plan.exit_code == 2
