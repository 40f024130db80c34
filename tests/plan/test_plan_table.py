"""plan_lineage as data: (spec + faked observed state) -> expected action and reason.

Each row is one situation a human could be in; the planner is pure, so no
repository is needed here (tests/plan/test_plan_repos.py does it for real).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reconciler.kernel.base.config import (
    ENTRY_REQUEST_SCHEMA,
    Ceilings,
    Identity,
    LineagePaths,
    ModelConfig,
    Price,
    constraints_manifest,
)
from reconciler.plan import ACTIONS, REASONS, make_plan, plan_lineage
from reconciler.spec.probes import UntilSpec
from reconciler.state.kernel_store import KernelFacts, StoredKernel
from reconciler.state.observe import Interrupted, Observed, ReadProblem

PAID = Price(Decimal("5.00"), Decimal("30.00"))
ME = Identity("https://example.invalid/ouro.git", "main", "a" * 40, "b" * 64)
OTHER_COMMIT = "c" * 40
PATHS = LineagePaths(Path("/l/x"), Path("/l/x.git"), Path("/l/x.observations"),
                     "lineage-x", "observations/lineage-x")
META = {"schema": "ouroboros-lineage/v2", "instrument_repository": ME.repository,
        "instrument_ref": "main", "instrument_commit": ME.commit,
        "instrument_fingerprint": ME.fingerprint, "seed_sha256": "d" * 64}
OBS_META = {**META, "schema": "ouroboros-observations/v1", "lineage_branch": "lineage-x",
            "observation_branch": "observations/lineage-x"}


@dataclass(frozen=True)
class FakeSpec:
    name: str = "x"
    generations: int = 5
    sha256: str = "e" * 64
    instrument_pin: str | None = None
    model_config: ModelConfig = field(
        # priced, so that the worst case is the budget (the plan reads price, not provider)
        default_factory=lambda: ModelConfig("echo", "echo", price=PAID,
                                            budget_usd=Decimal("0.50")))
    ceilings_config: Ceilings = field(default_factory=Ceilings)

    def paths(self) -> LineagePaths:
        return PATHS

    def model(self) -> ModelConfig:
        return self.model_config

    def ceilings(self) -> Ceilings:
        return self.ceilings_config


@dataclass(frozen=True)
class UntilFakeSpec(FakeSpec):
    """A spec with one probe ``p`` (digest ``d``) and ``spec.until`` on its metric ``m``."""

    probes: tuple[Any, ...] = (SimpleNamespace(name="p", digest="d",
                                               ceilings=SimpleNamespace(cpu=2)),)
    spec: Any = field(default_factory=lambda: SimpleNamespace(spec=SimpleNamespace(until=[
        UntilSpec(probe="p", metric="m", at_least=1)])))


@dataclass(frozen=True)
class SuspendedFakeSpec(FakeSpec):
    """A spec with ``spec.suspend: true``."""

    spec: Any = field(default_factory=lambda: SimpleNamespace(spec=SimpleNamespace(
        suspend=True)))


def record(model: ModelConfig | None = None, ceilings: Ceilings | None = None) -> dict[str, Any]:
    model = model or FakeSpec().model_config
    return {"generation": 3, "provider": model.provider, "model": model.name,
            "constraints": constraints_manifest(ceilings or Ceilings(), model)}


def observed(**changes: Any) -> Observed:
    """A healthy lineage at 3 generations, with ``changes`` applied."""
    base = Observed(
        paths=PATHS, worktree_exists=True, git_dir_exists=True, observations_exist=True,
        is_lineage=True, root_commit="1" * 40, lineage_metadata=dict(META),
        observation_metadata=dict(OBS_META), lineage_head="2" * 40, observation_head="3" * 40,
        head_branch="lineage-x", generations=3, last_generation=None, observed_generations=3,
        last_observation=record(), dirty=False, dirty_paths=(), interrupted=None, problems=(),
        full_walk=False,
    )
    return dataclasses.replace(base, **changes)


NOTHING = dict(worktree_exists=False, git_dir_exists=False, observations_exist=False,
               is_lineage=False, root_commit=None, lineage_metadata=None,
               observation_metadata=None, lineage_head=None, observation_head=None,
               head_branch=None, generations=0, observed_generations=0, last_observation=None)


def problem(code: str, message: str = "damage") -> dict[str, Any]:
    return {"problems": (ReadProblem(code, message),)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class Row:
    id: str
    spec: FakeSpec
    seen: dict[str, Any]
    action: str
    reason: str | None = None
    missing: int = 0
    says: str = ""  # a fragment the message must contain
    kernel: Any = None  # the lineage's kernel facts (None: only this ouro's own kernel)


def facts(**changes: Any) -> KernelFacts:
    """A lineage born under OTHER_COMMIT, whose kernel nobody has, with ``changes``."""
    base = KernelFacts(
        commit=OTHER_COMMIT, fingerprint="0" * 64, entry=ENTRY_REQUEST_SCHEMA,
        repository="/src/ouro", metadata=dict(META), running=ME, running_entry=ENTRY_REQUEST_SCHEMA,
        store=Path("/s"), commit_fingerprint=None, commit_known_from=None, stored=None,
        damaged=None,
    )
    return dataclasses.replace(base, **changes)


OLD = {"lineage_metadata": {**META, "instrument_commit": OTHER_COMMIT,
                            "instrument_fingerprint": "0" * 64},
       "observation_metadata": {**OBS_META, "instrument_commit": OTHER_COMMIT,
                                "instrument_fingerprint": "0" * 64}}


ROWS = [
    Row("create-when-nothing-exists", FakeSpec(), NOTHING, "create", missing=5,
        says="apply creates it"),
    Row("create-zero-generations", FakeSpec(generations=0), NOTHING, "create", missing=0),
    Row("extend-three-of-five", FakeSpec(), {}, "extend", missing=2, says="runs 2 more"),
    Row("in-sync", FakeSpec(generations=3), {}, "in-sync", says="nothing to do"),
    Row("ahead", FakeSpec(generations=1), {}, "ahead", says="more than the 1"),
    Row("done-when-until-holds", UntilFakeSpec(), {
        "probe_metrics": {"d": {2: {"m": 1}}}, "probe_coverage": {"d": frozenset({1, 2, 3})}},
        "done", says="target-reached: gen 2 measured p.m = 1"),
    Row("extend-when-until-does-not-hold", UntilFakeSpec(), {
        "probe_metrics": {"d": {2: {"m": 0}, 3: None}}}, "extend", missing=2,
        says="runs 2 more"),
    Row("suspended-instead-of-extend", SuspendedFakeSpec(), {}, "suspended",
        says="spec.suspend is true"),
    Row("suspended-instead-of-create", SuspendedFakeSpec(), NOTHING, "suspended",
        says="0 of 5 generations"),
    Row("suspended-instead-of-recover", SuspendedFakeSpec(), {"interrupted": Interrupted(
        "discard", 4, None, "running", "generation 4 was interrupted")}, "suspended",
        says="apply starts none"),
    Row("suspended-in-sync-is-in-sync", SuspendedFakeSpec(generations=3), {}, "in-sync"),
    Row("suspended-and-refused-is-refused", SuspendedFakeSpec(instrument_pin=OTHER_COMMIT), {},
        "refuse", reason="spec-pin-mismatch"),
    Row("extend-dirty-worktree", FakeSpec(), {"dirty": True, "dirty_paths": ("a.txt",)},
        "extend", missing=2),
    Row("recover-roll-forward", FakeSpec(), {"interrupted": Interrupted(
        "roll-forward", 4, "9" * 40, "publishing", "observation 4 names 999")},
        "recover", missing=1),
    Row("recover-discard", FakeSpec(), {"interrupted": Interrupted(
        "discard", 4, None, "running", "generation 4 was interrupted")}, "recover", missing=2),
    Row("recover-cleanup-in-sync", FakeSpec(generations=3), {"interrupted": Interrupted(
        "cleanup", 3, "2" * 40, "publishing", "published")}, "recover", missing=0),
    Row("refuse-spec-pin-mismatch", FakeSpec(instrument_pin=OTHER_COMMIT), {}, "refuse",
        "spec-pin-mismatch", says="change spec.instrument.commit"),
    Row("refuse-spec-pin-mismatch-even-for-create", FakeSpec(instrument_pin=OTHER_COMMIT),
        NOTHING, "refuse", "spec-pin-mismatch"),
    Row("spec-pin-matches", FakeSpec(instrument_pin=ME.commit), {}, "extend", missing=2),
    Row("refuse-not-a-lineage", FakeSpec(), problem("not-a-lineage"), "refuse",
        "not-a-lineage", says="point spec.storage"),
    Row("refuse-branch-mismatch", FakeSpec(), problem("branch-mismatch"), "refuse",
        "branch-mismatch", says="check out the spec's branch"),
    Row("refuse-no-metadata", FakeSpec(), {**problem("no-metadata"), "lineage_metadata": None},
        "refuse", "no-metadata", says="start a new lineage"),
    Row("refuse-partial-paths", FakeSpec(), {**problem("partial-paths"),
                                              "observations_exist": False},
        "refuse", "partial-paths", says="restore the missing places"),
    Row("no-metadata-beats-partial-paths", FakeSpec(),
        {"problems": (ReadProblem("partial-paths", "missing"),
                      ReadProblem("no-metadata", "old"))}, "refuse", "no-metadata"),
    Row("refuse-instrument-commit-drift", FakeSpec(),
        {"lineage_metadata": {**META, "instrument_commit": OTHER_COMMIT}}, "refuse",
        "instrument-commit-drift", says="run the ouro at that commit, or start a new lineage"),
    Row("refuse-fingerprint-drift", FakeSpec(),
        {"lineage_metadata": {**META, "instrument_fingerprint": "0" * 64},
         "observation_metadata": {**OBS_META, "instrument_fingerprint": "0" * 64}},
        "refuse", "fingerprint-drift", says="different physics"),
    Row("drift-beats-recover", FakeSpec(),
        {"lineage_metadata": {**META, "instrument_commit": OTHER_COMMIT},
         "interrupted": Interrupted("discard", 4, None, "running", "x")},
        "refuse", "instrument-commit-drift"),
    Row("refuse-observation-metadata-differs", FakeSpec(),
        {"observation_metadata": {**OBS_META, "seed_sha256": "f" * 64}}, "refuse",
        "observation-disagrees", says="seed_sha256"),
    Row("refuse-observation-metadata-other-branch", FakeSpec(),
        {"observation_metadata": {**OBS_META, "lineage_branch": "lineage-y"}}, "refuse",
        "observation-disagrees", says="lineage_branch"),
    Row("refuse-observation-names-foreign-commit", FakeSpec(),
        problem("observation-disagrees", "observation 3 names abab"), "refuse",
        "observation-disagrees", says="observation 3 names abab"),
    Row("extend-with-the-running-kernel-of-an-identical-commit", FakeSpec(),
        {"lineage_metadata": {**META, "instrument_commit": OTHER_COMMIT},
         "observation_metadata": {**OBS_META, "instrument_commit": OTHER_COMMIT}},
        "extend", missing=2, says="runs 2 more",
        kernel=facts(fingerprint=ME.fingerprint, commit_fingerprint=ME.fingerprint,
                     commit_known_from="checkout")),
    Row("extend-with-the-stored-kernel", FakeSpec(), OLD, "extend", missing=2,
        kernel=facts(stored=StoredKernel("0" * 64, OTHER_COMMIT, Path("/s/0"), "ouro_kernel_0",
                                         ENTRY_REQUEST_SCHEMA, (), 0))),
    Row("extend-materialized-from-the-checkout", FakeSpec(), OLD, "extend", missing=2,
        kernel=facts(commit_fingerprint="0" * 64, commit_known_from="checkout")),
    Row("refuse-kernel-unavailable", FakeSpec(), OLD, "refuse", "kernel-unavailable",
        says=f"ouro kernel fetch {OTHER_COMMIT} --from /src/ouro", kernel=facts()),
    Row("refuse-kernel-damaged", FakeSpec(), OLD, "refuse", "kernel-damaged",
        says="is damaged", kernel=facts(damaged="ouro: kernel store entry /s/0 is damaged")),
    Row("refuse-commit-with-another-kernel-is-fingerprint-drift", FakeSpec(), OLD, "refuse",
        "fingerprint-drift", says="same commit, different physics",
        kernel=facts(commit_fingerprint="1" * 64, commit_known_from="checkout")),
    Row("refuse-foreign-kernel-without-entry-point", FakeSpec(), OLD, "refuse",
        "foreign-kernel", says="not an ouro kernel", kernel=facts(entry=None)),
    Row("refuse-pinned-birth-kernel-unavailable", FakeSpec(instrument_pin=OTHER_COMMIT),
        NOTHING, "refuse", "kernel-unavailable", says="ouro kernel fetch",
        kernel=facts(for_birth=True, fingerprint="")),
    Row("pinned-birth-materialized", FakeSpec(instrument_pin=OTHER_COMMIT), NOTHING, "create",
        missing=5, kernel=facts(for_birth=True, commit_fingerprint="0" * 64,
                                commit_known_from="checkout")),
    Row("pin-names-another-commit-than-the-lineage", FakeSpec(instrument_pin="7" * 40), OLD,
        "refuse", "spec-pin-mismatch", says="born under", kernel=facts()),
    Row("refuse-unbalanced", FakeSpec(),
        problem("unbalanced", "3 generation commits but 1 observations"), "refuse",
        "unbalanced", says="ouro verify"),
    Row("refuse-damaged", FakeSpec(),
        problem("damaged", "the worktree /l is a symlink (to /victim)"), "refuse", "damaged",
        says="put the lineage's own worktree folder back"),
    Row("refuse-generation-running", FakeSpec(),
        problem("generation-running", "generation 4 is running in process 77"), "refuse",
        "generation-running", says="let that generation finish"),
    Row("unbalanced-beats-recover", FakeSpec(),
        {**problem("unbalanced"),
         "interrupted": Interrupted("discard", 4, None, "running", "x")},
        "refuse", "unbalanced"),
]


def _no_key(model: ModelConfig) -> str | None:
    """A preflight that finds the key variable unset (as reconciler.state.preflight would)."""
    return f"provider {model.provider} needs an API key; set OPENAI_API_KEY"


PREFLIGHT_ROWS = [
    Row("refuse-provider-config-create", FakeSpec(), NOTHING, "refuse", "provider-config",
        says="set OPENAI_API_KEY"),
    Row("refuse-provider-config-extend", FakeSpec(), {}, "refuse", "provider-config",
        says="fix spec.model or the environment"),
    Row("provider-config-not-asked-in-sync", FakeSpec(generations=3), {}, "in-sync"),
    Row("provider-config-not-asked-ahead", FakeSpec(generations=1), {}, "ahead"),
    Row("provider-config-not-asked-roll-forward-only", FakeSpec(generations=4),
        {"interrupted": Interrupted("roll-forward", 4, "9" * 40, "publishing", "obs 4")},
        "recover"),
]


@pytest.mark.parametrize("row", PREFLIGHT_ROWS, ids=lambda r: r.id)
def test_plan_row_with_preflight(row: Row) -> None:
    asked: list[ModelConfig] = []

    def preflight(model: ModelConfig) -> str | None:
        asked.append(model)
        return _no_key(model)

    result = plan_lineage(row.spec, observed(**row.seen), ME, preflight=preflight)
    assert (result.action, result.reason) == (row.action, row.reason), result.message
    assert row.says in result.message and result.name in result.message
    assert bool(asked) == (row.reason == "provider-config")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_plan_row(row: Row) -> None:
    result = plan_lineage(row.spec, observed(**row.seen), ME, kernel=row.kernel)
    assert (result.action, result.reason) == (row.action, row.reason), result.message
    assert result.missing_generations == row.missing
    assert result.max_spend_usd == row.missing * row.spec.model_config.budget_usd
    assert row.says in result.message
    assert result.name in result.message


def test_every_action_and_reason_has_a_row() -> None:
    assert {row.action for row in ROWS} == set(ACTIONS)
    assert {row.reason for row in ROWS + PREFLIGHT_ROWS} - {None} == set(REASONS)


def test_refused_lineage_still_reports_what_was_read() -> None:
    result = plan_lineage(FakeSpec(), observed(**problem("unbalanced")), ME)
    assert result.observed_generations == 3
    assert result.heads == {"lineage": "2" * 40, "observation": "3" * 40}


def test_drift_message_names_both_instruments() -> None:
    seen = observed(lineage_metadata={**META, "instrument_commit": OTHER_COMMIT})
    message = plan_lineage(FakeSpec(), seen, ME).message
    assert OTHER_COMMIT[:12] in message and ME.commit[:12] in message
    assert META["instrument_fingerprint"][:12] in message


@pytest.mark.parametrize(
    ("id_", "spec", "fields"),
    [
        ("no-change", FakeSpec(), []),
        ("model", FakeSpec(model_config=ModelConfig("echo", "echo-2",
                                                    budget_usd=Decimal("0.50"))), ["model"]),
        ("provider", FakeSpec(model_config=ModelConfig("replay", "echo",
                                                       budget_usd=Decimal("0.50"))),
         ["provider"]),
        ("wall", FakeSpec(ceilings_config=Ceilings(wall_seconds=1200)),
         ["constraints.generation.cpu_quota_percent", "constraints.generation.wall_seconds"]),
        ("budget", FakeSpec(model_config=ModelConfig("echo", "echo", budget_usd=Decimal("2"))),
         ["constraints.model.spending_budget.amount"]),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_changes_against_last_observation(id_: str, spec: FakeSpec, fields: list[str]) -> None:
    result = plan_lineage(spec, observed(), ME)
    assert [c.field for c in result.changes] == fields


def _recorded_under_other_physics(edit: Any) -> dict[str, Any]:
    last = record()
    constraints = dict(last["constraints"])
    edit(constraints)
    return {**last, "constraints": constraints}


@pytest.mark.parametrize(
    "edit",
    [lambda c: c.pop("sandbox", None),  # a kernel from before physics release 2
     lambda c: c.pop("model") and c.update(model={  # from before max_requests
         k: v for k, v in record()["constraints"]["model"].items()
         if k not in {"max_requests", "max_audited_bytes"}}),
     lambda c: c.update(sandbox={"seccomp": {"digest": "another filter"}})],  # its own
    ids=["no-sandbox-section", "no-max-requests", "another-filter"],
)
def test_what_the_physics_discloses_is_no_change_of_the_spec(edit: Any) -> None:
    """Only what a spec sets counts: a manifest key the last generation's kernel did not
    know, or the filter its physics disclosed, is no change the spec makes."""
    seen = observed(last_observation=_recorded_under_other_physics(edit))
    assert plan_lineage(FakeSpec(), seen, ME).changes == ()
    wall = FakeSpec(ceilings_config=Ceilings(wall_seconds=1200))
    assert "constraints.generation.wall_seconds" in [  # a spec change still shows
        c.field for c in plan_lineage(wall, seen, ME).changes]


def test_budget_change_shows_both_amounts() -> None:
    spec = FakeSpec(model_config=ModelConfig("echo", "echo", budget_usd=Decimal("2")))
    (change,) = plan_lineage(spec, observed(), ME).changes
    assert (change.observed, change.desired) == ("0.50", "2")


@pytest.mark.parametrize(
    ("rows", "exit_code"),
    [
        ([(FakeSpec(generations=3), {})], 0),
        ([(FakeSpec(generations=1), {})], 0),
        ([(FakeSpec(generations=3), {}), (FakeSpec(), {})], 2),
        ([(FakeSpec(), NOTHING)], 2),
        ([(FakeSpec(), {}), (FakeSpec(), problem("unbalanced"))], 1),
    ],
    ids=["in-sync", "ahead-is-not-pending", "extend-pending", "create-pending",
         "any-refusal"],
)
def test_exit_codes(rows: list[tuple[FakeSpec, dict[str, Any]]], exit_code: int) -> None:
    plan = make_plan([(spec, observed(**seen)) for spec, seen in rows], ME)
    assert plan.exit_code == exit_code


def test_worst_case_spend_is_decimal_and_summed() -> None:
    cheap = FakeSpec(model_config=ModelConfig("openai", "gpt", price=PAID,
                                              budget_usd=Decimal("0.10")))
    dear = FakeSpec(name="y", model_config=ModelConfig("openai", "gpt", price=PAID,
                                                       budget_usd=Decimal("1.25")))
    free = FakeSpec(name="z", model_config=ModelConfig("echo", "echo",
                                                       budget_usd=Decimal("1.00")))
    plan = make_plan([(cheap, observed()), (dear, observed(**NOTHING)),
                      (free, observed(**NOTHING))], ME)
    assert plan.max_spend_usd == Decimal("0.20") + Decimal("6.25")
    assert plan.lineages[2].missing_generations == 5
    assert plan.lineages[2].max_spend_usd == 0  # offline providers cost nothing
    assert isinstance(plan.max_spend_usd, Decimal)
    assert plan.counts["extend"] == 1 and plan.counts["create"] == 2


def test_loaded_spec_generations_are_read_from_the_document() -> None:
    from reconciler.plan import desired_generations

    class Body:
        generations = 9

    class Document:
        spec = Body()

    @dataclass
    class Loaded:
        spec: Any
        name: str = "z"

    assert desired_generations(Loaded(Document())) == 9  # type: ignore[arg-type]


# ---------------------------------------------------------------- every reason at once

FOREIGN_META = {**META, "instrument_repository": "https://github.com/scottviteri/ouroboros",
                "instrument_ref": "main-with-debian-emacs-path",
                "instrument_commit": OTHER_COMMIT, "instrument_fingerprint": "0" * 64}


@pytest.mark.parametrize(
    ("id_", "spec", "seen", "reasons"),
    [
        ("branch-and-foreign-instrument", FakeSpec(),
         {**problem("branch-mismatch", "has no branch 'lineage-x' (HEAD is on 'peer')"),
          "lineage_metadata": FOREIGN_META,
          "observation_metadata": {**OBS_META, **FOREIGN_META,
                                   "schema": "ouroboros-observations/v1"}},
         ["branch-mismatch", "instrument-commit-drift"]),
        ("pin-problems-drift-and-balance", FakeSpec(instrument_pin=OTHER_COMMIT),
         {"problems": (ReadProblem("unbalanced", "3 commits, 1 observation"),
                       ReadProblem("partial-paths", "missing: /l/x"),
                       ReadProblem("not-a-lineage", "odd root")),
          "lineage_metadata": {**META, "instrument_commit": OTHER_COMMIT}},
         ["spec-pin-mismatch", "not-a-lineage", "partial-paths", "instrument-commit-drift",
          "observation-disagrees", "unbalanced"]),
        ("no-metadata-is-not-also-drift", FakeSpec(),
         {**problem("no-metadata"), "lineage_metadata": None}, ["no-metadata"]),
        ("commit-drift-is-not-also-fingerprint-drift", FakeSpec(),
         {"lineage_metadata": {**META, "instrument_commit": OTHER_COMMIT,
                               "instrument_fingerprint": "0" * 64},
          "observation_metadata": {**OBS_META, "instrument_commit": OTHER_COMMIT,
                                   "instrument_fingerprint": "0" * 64}},
         ["instrument-commit-drift"]),
        ("nothing-exists-only-the-pin", FakeSpec(instrument_pin=OTHER_COMMIT),
         {**NOTHING, **problem("partial-paths")}, ["spec-pin-mismatch"]),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_refusal_lists_every_reason_in_order(
    id_: str, spec: FakeSpec, seen: dict[str, Any], reasons: list[str]
) -> None:
    result = plan_lineage(spec, observed(**seen), ME)
    assert [r.reason for r in result.refusals] == reasons
    assert (result.reason, result.message) == (reasons[0], result.refusals[0].message)
    order = [reason for reason in REASONS if reason in reasons]
    assert reasons == order  # the stable order is REASONS' order
    assert all(r.message.startswith("lineage x") for r in result.refusals)
    assert result.observed_generations == seen.get("generations", 3)


def test_a_lineage_of_another_instrument_names_it_and_says_ouro_does_not_extend_it() -> None:
    result = plan_lineage(FakeSpec(), observed(lineage_metadata=FOREIGN_META,
                                               observation_metadata={
                                                   **OBS_META, **FOREIGN_META,
                                                   "schema": "ouroboros-observations/v1"}), ME)
    assert result.reason == "instrument-commit-drift"
    for words in ("https://github.com/scottviteri/ouroboros", "main-with-debian-emacs-path",
                  OTHER_COMMIT, "not by an ouro kernel", "reads and verifies",
                  "does not extend"):
        assert words in result.message
    assert "run the ouro at that commit" not in result.message


def test_an_ouro_lineage_of_another_commit_is_told_to_run_that_ouro() -> None:
    # Same repository by name, even through another URL form: ouro's own lineage.
    meta = {**META, "instrument_commit": OTHER_COMMIT,
            "instrument_repository": "git@example.invalid:ouro"}
    result = plan_lineage(FakeSpec(), observed(lineage_metadata=meta,
                                               observation_metadata={**OBS_META, **meta,
                                                   "schema": "ouroboros-observations/v1"}), ME)
    assert "run the ouro at that commit" in result.message
    assert "another instrument" not in result.message


def test_a_provider_problem_comes_after_every_other_reason() -> None:
    seen = observed(lineage_metadata={**META, "instrument_commit": OTHER_COMMIT},
                    observation_metadata={**OBS_META, "instrument_commit": OTHER_COMMIT})
    result = plan_lineage(FakeSpec(), seen, ME, preflight=_no_key)
    assert [r.reason for r in result.refusals] == ["instrument-commit-drift", "provider-config"]
    damaged = dataclasses.replace(seen, problems=(ReadProblem("damaged", "a stale lock"),))
    found = [r.reason for r in plan_lineage(FakeSpec(), damaged, ME, preflight=_no_key).refusals]
    assert found == [reason for reason in REASONS if reason in found]  # REASONS' order
    assert found[-1] == "provider-config"


def test_every_reason_has_a_remedy_in_the_one_table() -> None:
    from reconciler.plan.remedies import REMEDIES

    assert set(REASONS) <= {key.split("/")[0] for key in REMEDIES}


def test_the_refusal_order_is_the_order_of_reasons() -> None:
    from reconciler.plan.planner import _REFUSAL_ORDER

    assert [reason for reason, _ in _REFUSAL_ORDER] + ["provider-config"] == list(REASONS)
