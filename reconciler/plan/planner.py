"""Desired (specs) vs observed (repositories) -> one action per lineage.

Rule: purely computational, no I/O here. Inputs are a loaded spec, an
``Observed`` (read by ``reconciler.state.observe``) and this instrument's
``Identity``; the output says what apply would do, and, when it refuses, why
and what a human should do about it. Refusal checks run in a fixed order, most
fundamental first (``_REFUSAL_ORDER``), and every one that fails is reported:
the first is the plan's ``reason``, all are its ``refusals``, each with its
remedy (``reconciler.plan.remedies``).

The observed side is described here as a protocol (``ObservedState``), which
``reconciler.state.observe.Observed`` satisfies: the planner never imports the
module that reads repositories.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, Protocol, get_args

from reconciler.kernel.base.config import (
    ENTRY_METADATA_KEY,
    FREE,
    Ceilings,
    Identity,
    LineagePaths,
    ModelConfig,
    constraints_manifest,
)
from reconciler.kernel.base.formats import INSTRUMENT_KEYS

# The refusal reasons, in the order a refusal lists them: one typed list, the kernel's,
# shared with state and the kernel itself.
from reconciler.kernel.base.refusals import REASONS, Reason
from reconciler.plan.continuation import failure_note
from reconciler.plan.forks import (
    ForkSourceLike,
    PlanReason,
    fork_json,
    fork_notes,
    fork_refusal,
)
from reconciler.plan.kernel_choice import KernelChoice, KernelFactsLike, choose
from reconciler.plan.membership import membership_refusal
from reconciler.plan.probes import (
    MeasurementWork,
    Series,
    UntilStop,
    measurement_work,
    shown_stop,
    unseen_metrics,
    until_stop,
)
from reconciler.plan.remedies import foreign_instrument, instrument_name, remedy
from reconciler.spec import sets as spec_sets

__all__ = [
    "ACTIONS",
    "REASONS",
    "Change",
    "LineagePlan",
    "ObservedState",
    "Plan",
    "PlanSpec",
    "Refusal",
    "changes_against",
    "desired_generations",
    "make_plan",
    "plan_lineage",
    "plan_of",
    "refusals",
    "shown_until",
    "suspended",
]

Action = Literal["create", "extend", "in-sync", "ahead", "recover", "refuse", "done",
                 "suspended"]
ACTIONS: tuple[Action, ...] = get_args(Action)
# Metadata keys the observation repo copies from the lineage's seed metadata.
_SHARED_METADATA = (*INSTRUMENT_KEYS, ENTRY_METADATA_KEY)


class ProblemLike(Protocol):
    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...


class InterruptedLike(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def detail(self) -> str: ...


class ObservedState(Protocol):
    """What the planner needs of an observed lineage (``reconciler.state.observe.Observed``)."""

    @property
    def paths(self) -> LineagePaths: ...
    @property
    def any_exists(self) -> bool: ...
    @property
    def lineage_metadata(self) -> dict[str, Any] | None: ...
    @property
    def observation_metadata(self) -> dict[str, Any] | None: ...
    @property
    def lineage_head(self) -> str | None: ...
    @property
    def observation_head(self) -> str | None: ...
    @property
    def generations(self) -> int: ...
    @property
    def last_observation(self) -> dict[str, Any] | None: ...
    @property
    def dirty(self) -> bool: ...
    @property
    def dirty_paths(self) -> tuple[str, ...]: ...
    @property
    def interrupted(self) -> InterruptedLike | None: ...
    @property
    def problems(self) -> Sequence[ProblemLike]: ...


class PlanSpec(Protocol):
    """What the planner needs of a spec (``reconciler.spec.load.LoadedSpec`` has it all)."""

    @property
    def name(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def instrument_pin(self) -> str | None: ...
    def paths(self) -> LineagePaths: ...
    def model(self) -> ModelConfig: ...
    def ceilings(self) -> Ceilings: ...


def _conditions(spec: PlanSpec) -> tuple[Sequence[Any], dict[str, str]]:
    """The spec's ``spec.until`` conditions and its probes' current digests (name -> digest)."""
    model: Any = getattr(spec, "spec", None)
    conditions = getattr(getattr(model, "spec", None), "until", None) or ()
    return conditions, {p.name: p.digest for p in getattr(spec, "probes", ())}


def _notes(spec: PlanSpec, observed: ObservedState, running: str | None, have: int,
           desired: int) -> list[str]:
    """The plan's notes: warnings that do not change its action."""
    notes = _first_notes(observed, running)
    notes += _failure_notes(observed.last_observation, have) + _stop_notes(observed, have, desired)
    notes += fork_notes(getattr(spec, "fork", None), observed.lineage_metadata)
    return notes + _until_notes(spec, observed)


def _until_notes(spec: PlanSpec, observed: ObservedState) -> list[str]:
    """``spec.until`` metrics an undeclared probe has never printed (``unseen_metrics``)."""
    conditions, digests = _conditions(spec)
    if not conditions:
        return []
    model: Any = getattr(spec, "spec", None)
    declared = {probe.name: probe.metrics
                for probe in getattr(getattr(model, "spec", None), "probes", None) or ()}
    return unseen_metrics(conditions, declared, digests,
                          getattr(observed, "probe_metrics", {}))


def until_of(spec: PlanSpec, observed: ObservedState, have: int) -> UntilStop | None:
    """The ``spec.until`` condition that holds over the lineage's measured generations."""
    conditions, digests = _conditions(spec)
    if not conditions:
        return None
    return until_stop(conditions, digests, getattr(observed, "probe_metrics", {}), have)


def shown_until(spec: PlanSpec, metrics: Callable[[], Mapping[str, Series]],
                generations: int) -> UntilStop | None:
    """The ``spec.until`` stop ``ouro status`` and ``ouro log`` show for a lineage of
    ``generations`` (``reconciler.plan.probes.shown_stop``, the viewer's rule too)."""
    conditions, digests = _conditions(spec)
    return shown_stop(conditions, digests, metrics, generations, desired_generations(spec))


def _done(result: Callable[..., LineagePlan], stop: UntilStop, where: str) -> LineagePlan:
    return dataclasses.replace(result("done", f"{where}; {stop.code}: {stop.message}; apply "
                                      "runs no more until the condition changes"), until=stop)


def suspended(spec: PlanSpec) -> bool:
    """``spec.suspend`` of the document: the lineage is paused (no generation starts)."""
    model: Any = getattr(spec, "spec", None)
    return getattr(getattr(model, "spec", None), "suspend", False) is True


def desired_generations(spec: PlanSpec) -> int:
    """``spec.generations`` of the document (LoadedSpec.spec is the pydantic model)."""
    direct = getattr(spec, "generations", None)
    if isinstance(direct, int):
        return direct
    model: Any = getattr(spec, "spec", None)
    for candidate in (getattr(getattr(model, "spec", None), "generations", None),
                      getattr(model, "generations", None)):
        if isinstance(candidate, int):
            return candidate
    raise TypeError(f"spec {spec.name!r} has no desired generation count")


@dataclass(frozen=True)
class Change:
    """One difference between the spec and the last observed generation."""

    field: str  # provider, model, or a dotted path into the constraints manifest
    observed: Any
    desired: Any

    def __str__(self) -> str:
        return f"{self.field}: {self.observed!r} -> {self.desired!r}"


@dataclass(frozen=True)
class Refusal:
    """One reason apply would refuse a lineage, and the message naming its remedy."""

    reason: PlanReason
    message: str


@dataclass(frozen=True)
class LineagePlan:
    name: str
    action: Action
    reason: PlanReason | None
    message: str
    observed_generations: int
    desired_generations: int
    missing_generations: int
    max_spend_usd: Decimal
    changes: tuple[Change, ...]
    heads: dict[str, str | None]  # {"lineage": id|None, "observation": id|None}
    spec_sha256: str = ""
    notes: tuple[str, ...] = ()  # warnings that do not change the action (dirty worktree, ...)
    interrupted: str | None = None  # roll-forward | discard | cleanup
    branches: dict[str, str] = field(default_factory=dict)  # {"lineage": .., "observation": ..}
    # Every reason a refused lineage is refused for, in a stable order; the first is
    # ``reason`` / ``message``.
    refusals: tuple[Refusal, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)  # the spec's metadata.labels
    # "running in apply pid N on HOST, generation K" while another apply holds it
    running: str | None = None
    kernel: KernelChoice | None = None  # which kernel runs it (None: this ouro's, unresolved)
    set_name: str | None = None  # the LineageSet it is a member of (None: a plain lineage)
    measure: MeasurementWork = field(default_factory=MeasurementWork)  # plan.probes
    until: UntilStop | None = None  # action "done": the spec.until condition that holds
    fork: dict[str, Any] | None = None  # a fork to be born: its parent generation (plan.forks)
    # action "done": a selection's decision stopped this member (stop reason not-selected)
    not_selected: spec_sets.NotSelected | None = None

    @property
    def pending(self) -> bool:
        return self.action in ("create", "extend", "recover")


@dataclass(frozen=True)
class Orphan:
    """A lineage at a set's default place, named as its member, that the set no longer
    has (replicas lowered, a matrix value removed). Kept: history is never removed."""

    name: str
    set_name: str
    path: str


@dataclass(frozen=True)
class Plan:
    lineages: tuple[LineagePlan, ...]
    instrument: Identity
    counts: dict[str, int] = field(default_factory=dict)
    orphans: tuple[Orphan, ...] = ()

    @property
    def max_spend_usd(self) -> Decimal:
        return sum((item.max_spend_usd for item in self.lineages), Decimal(0))

    @property
    def refused(self) -> bool:
        return any(item.action == "refuse" for item in self.lineages)

    @property
    def exit_code(self) -> int:
        """0 everything in sync, 2 changes pending, 1 any refusal."""
        if self.refused:
            return 1
        return 2 if any(item.pending or item.measure.measurements
                        for item in self.lineages) else 0


# ---------------------------------------------------------------- checks


_Check = Callable[[PlanSpec, ObservedState, Identity], str | None]


def _short(object_id: Any) -> str:
    return f"{str(object_id)[:12]}…" if object_id else "unknown"


def _problem_messages(observed: ObservedState, code: str) -> str:
    return "; ".join(p.message for p in observed.problems if p.code == code)


def _pin(spec: PlanSpec, observed: ObservedState, me: Identity) -> str | None:
    del observed
    pin = spec.instrument_pin
    if not pin:
        return None
    wanted = pin.strip().lower()
    if me.commit == wanted or (len(wanted) >= 7 and me.commit.startswith(wanted)):
        return None
    return (
        f"lineage {spec.name}: the spec pins instrument {_short(wanted)}; this ouro is "
        f"{_short(me.commit)}: " + remedy("spec-pin-mismatch", wanted=_short(wanted))
    )


def _lineage_pin(spec: PlanSpec, observed: ObservedState) -> str | None:
    """A pin chooses the kernel of new lineages; an existing one must have been born under it."""
    pin = spec.instrument_pin
    if not pin:
        return None
    wanted = pin.strip().lower()
    born = (observed.lineage_metadata or {}).get("instrument_commit")
    if isinstance(born, str) and (born == wanted or (len(wanted) >= 7
                                                     and born.startswith(wanted))):
        return None
    return (
        f"lineage {spec.name}: the spec pins instrument {_short(wanted)}, but the lineage was "
        f"born under {_short(born)}: " + remedy("spec-pin-mismatch/existing")
    )


def _from_problems(code: Reason) -> _Check:
    def check(spec: PlanSpec, observed: ObservedState, me: Identity) -> str | None:
        del me
        found = _problem_messages(observed, code)
        return f"lineage {spec.name}: {found}: {remedy(code)}" if found else None

    return check


def _commit_drift(spec: PlanSpec, observed: ObservedState, me: Identity) -> str | None:
    meta = observed.lineage_metadata
    if meta is None:  # unreadable or absent metadata is its own reason (no-metadata)
        return None
    born = meta.get("instrument_commit")
    if born == me.commit:
        return None
    if foreign_instrument(meta, me):
        return (
            f"lineage {spec.name} was written by another instrument, "
            f"{instrument_name(meta)} with fingerprint "
            f"{_short(meta.get('instrument_fingerprint'))}, not by an ouro kernel: "
            + remedy("instrument-commit-drift/foreign")
        )
    return (
        f"lineage {spec.name} was started by instrument {_short(born)} (fingerprint "
        f"{_short(meta.get('instrument_fingerprint'))}); this ouro is {_short(me.commit)}: "
        + remedy("instrument-commit-drift")
    )


def _fingerprint_drift(spec: PlanSpec, observed: ObservedState, me: Identity) -> str | None:
    meta = observed.lineage_metadata
    # A different commit is already a refusal that names the fingerprint too.
    if meta is None or meta.get("instrument_commit") != me.commit:
        return None
    born = meta.get("instrument_fingerprint")
    if born == me.fingerprint:
        return None
    return (
        f"lineage {spec.name} was started by instrument {_short(me.commit)} with kernel "
        f"fingerprint {_short(born)}; this ouro's kernel files fingerprint as "
        f"{_short(me.fingerprint)} (same commit, different physics): "
        + remedy("fingerprint-drift")
    )


def _no_check(spec: PlanSpec, observed: ObservedState, me: Identity) -> str | None:
    """A reason only the kernel choice gives (``refusals``, with a choice)."""
    del spec, observed, me
    return None


def _observation_disagrees(
    spec: PlanSpec, observed: ObservedState, me: Identity
) -> str | None:
    del me
    found: list[str] = []
    lineage, obs = observed.lineage_metadata or {}, observed.observation_metadata
    if obs is not None:
        for key in _SHARED_METADATA:
            if key in lineage and obs.get(key) != lineage.get(key):
                found.append(f"{key} is {obs.get(key)!r} in the observations, "
                             f"{lineage.get(key)!r} in the lineage")
        paths = observed.paths
        branches = () if _problem_messages(observed, "branch-mismatch") else (
            ("lineage_branch", paths.branch), ("observation_branch", paths.observation_branch))
        for key, want in branches:  # (a branch-mismatch already names both branches)
            if obs.get(key) != want:
                found.append(f"observation metadata {key} is {obs.get(key)!r}, not {want!r}")
    problems = _problem_messages(observed, "observation-disagrees")
    if problems:
        found.append(problems)
    if not found:
        return None
    return (
        f"lineage {spec.name}: the observation repo disagrees with the lineage ("
        + "; ".join(found) + "): " + remedy("observation-disagrees")
    )


# Every check runs; a refusal lists all that fail, in this order (most fundamental first).
_REFUSAL_ORDER: tuple[tuple[Reason, _Check], ...] = (
    ("spec-pin-mismatch", _pin),
    ("not-a-lineage", _from_problems("not-a-lineage")),
    ("branch-mismatch", _from_problems("branch-mismatch")),
    ("no-metadata", _from_problems("no-metadata")),
    ("partial-paths", _from_problems("partial-paths")),
    ("instrument-commit-drift", _commit_drift),
    ("fingerprint-drift", _fingerprint_drift),
    # the kernel choice's own refusals (``plan.kernel_choice``): checked only with a choice
    ("foreign-kernel", _no_check),
    ("kernel-unavailable", _no_check),
    ("kernel-damaged", _no_check),
    ("observation-disagrees", _observation_disagrees),
    ("unbalanced", _from_problems("unbalanced")),
    ("damaged", _from_problems("damaged")),
    ("generation-running", _from_problems("generation-running")),
)


# With the lineage's kernel chosen (``plan.kernel_choice``), the choice replaces the identity
# checks: its refusal (one of these) is given at its own place in the order.
_KERNEL_CHECKS: tuple[Reason, ...] = ("instrument-commit-drift", "fingerprint-drift",
                                      "foreign-kernel", "kernel-unavailable", "kernel-damaged")


def refusals(
    spec: PlanSpec, observed: ObservedState, me: Identity, provider_problem: str | None = None,
    choice: KernelChoice | None = None, fork: ForkSourceLike | None = None,
) -> tuple[Refusal, ...]:
    """Every reason apply would refuse this lineage for, in ``_REFUSAL_ORDER``. Pure.

    A lineage none of whose places exist is only checked against the spec's pin
    (with ``choice``: whether the pinned kernel can be had): the rest are facts
    about an existing lineage. ``provider_problem`` (what
    ``reconciler.state.preflight`` found wrong with the model's configuration, for
    a lineage that has generations to run) comes last; before it, for a fork yet to be
    born, why its ``fork`` source is none (``plan.forks``).
    """
    table = _REFUSAL_ORDER if observed.any_exists else _REFUSAL_ORDER[:1]
    found: list[Refusal] = []
    for reason, check in table:
        if choice is not None and reason == "spec-pin-mismatch":
            message = _lineage_pin(spec, observed) if observed.any_exists else None
            if not observed.any_exists and choice.reason is not None:
                found.append(Refusal(choice.reason, choice.message))
        elif choice is not None and reason in _KERNEL_CHECKS:
            if reason == choice.reason and observed.any_exists:
                found.append(Refusal(choice.reason, choice.message))
            continue
        else:
            message = check(spec, observed, me)
        if message:
            found.append(Refusal(reason, message))
    member = membership_refusal(spec.name, _set_of(spec), observed.last_observation)
    if member is not None:
        found.append(Refusal(*member))
    forked = fork_refusal(spec.name, fork) if fork is not None and not observed.any_exists \
        else None
    if forked is not None:
        found.append(Refusal(*forked))
    if provider_problem:
        found.append(Refusal(
            "provider-config",
            f"lineage {spec.name}: {provider_problem}: {remedy('provider-config')}",
        ))
    return tuple(found)


# ---------------------------------------------------------------- changes


def _flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(_flatten(value[key], f"{prefix}.{key}"))
        return out
    return {prefix: value}


_PHYSICS_SECTION = "constraints.sandbox."


_MANIFESTS: dict[str, dict[str, Any]] = {}


def _manifest(ceilings: Ceilings, model: ModelConfig) -> dict[str, Any]:
    """``constraints_manifest``, made once per distinct ceilings and model (a fleet's specs
    share a few; the kernel's filter disclosure in each costs ~0.1 ms). Keyed by their
    ``repr``, which tells apart what equality does not (``Decimal("1.0")`` from
    ``Decimal("1.00")``, whose text the manifest shows). Read-only for its callers."""
    key = repr((ceilings, model))
    found = _MANIFESTS.get(key)
    if found is None:
        if len(_MANIFESTS) >= 256:
            _MANIFESTS.clear()
        found = _MANIFESTS[key] = constraints_manifest(ceilings, model)
    return found


def changes_against(spec: PlanSpec, last_observation: dict[str, Any] | None) -> tuple[Change, ...]:
    """Provider, model and ceilings of the spec vs. those the last generation ran under."""
    if not last_observation:
        return ()
    model = spec.model()
    found: list[Change] = []
    for key, desired in (("provider", model.provider), ("model", model.name)):
        if key in last_observation and last_observation[key] != desired:
            found.append(Change(key, last_observation[key], desired))
    observed_constraints = last_observation.get("constraints")
    manifest = _manifest(spec.ceilings(), model)
    if isinstance(observed_constraints, dict) and observed_constraints != manifest:
        want = _flatten(manifest, "constraints")
        have = _flatten(observed_constraints, "constraints")
        # Only what a spec sets can differ by the spec's doing. A key the last generation
        # did not record is disclosure younger than the kernel that ran it (max_requests;
        # every key a spec sets is in every manifest since the original's), and the
        # `sandbox` section is the physics' own (the pinned kernel discloses its filter).
        for key in sorted(set(want) | set(have)):
            if key not in have or key.startswith(_PHYSICS_SECTION):
                continue
            if want.get(key) != have.get(key):
                found.append(Change(key, have.get(key), want.get(key)))
    return tuple(found)


# ---------------------------------------------------------------- plan


def _spend(missing: int, model: ModelConfig) -> Decimal:
    """Worst case: every missing generation spends its whole budget; free models spend nothing."""
    if model.price == FREE:
        return Decimal(0)
    return Decimal(missing) * model.budget_usd


Preflight = Callable[[ModelConfig], str | None]


def _to_run(desired: int, observed: ObservedState) -> int:
    """Generations apply would run (after any recovery), refused or not."""
    if not observed.any_exists:
        return desired
    done = observed.generations
    if observed.interrupted is not None and observed.interrupted.kind == "roll-forward":
        done += 1
    return max(0, desired - done)


def _first_notes(observed: ObservedState, running: str | None) -> list[str]:
    """Warnings that do not change the action: another apply at work, else human edits."""
    if running:  # its worktree and leftovers are that apply's work in progress
        return [f"{running}: apply waits for it (--lock-timeout), then plans again"]
    if observed.dirty:
        shown = ", ".join(observed.dirty_paths[:5])
        return [f"uncommitted edits in the worktree ({shown}): apply commits them "
                "as `external edit` before the next generation"]
    return []


def _failure_notes(last: dict[str, Any] | None, have: int) -> list[str]:
    """The last generation's model failure, if its observation records one."""
    failure = last.get("provider_failure") if isinstance(last, dict) else None
    if not isinstance(failure, dict) or last is None:
        return []
    number = last.get("generation")
    note = failure_note(number if isinstance(number, int) else have, failure)
    return [note] if note else []


def _stop_notes(observed: ObservedState, have: int, desired: int) -> list[str]:
    """The stop an apply recorded before the next generation (``state.stops``: a provider
    still unavailable, a replay folder with no reply left), while nothing ran since."""
    stopped: Any = getattr(observed, "stopped", None)  # optional on the observed state
    if stopped is None or have >= desired:
        return []
    return [f"the last apply stopped it before gen {stopped.generation + 1} "
            f"({stopped.reason}): {stopped.message}; apply checks again before it runs"]


def _generations(count: int, more: str = "") -> str:
    return f"{count} {more}generation" + ("" if count == 1 else "s")


def _paused(spec: PlanSpec, observed: ObservedState, desired: int) -> str | None:
    """The plan's message for a suspended lineage apply would otherwise touch, else None."""
    have = observed.generations
    if not suspended(spec) or (observed.any_exists and observed.interrupted is None
                               and have >= desired):
        return None
    return (f"lineage {spec.name}: {have} of {desired} generations; spec.suspend is true: "
            "apply starts none until it is false")


def _born_from(spec: PlanSpec, observed: ObservedState,
               fork: ForkSourceLike | None) -> dict[str, Any] | None:
    """What the plan shows of a fork to be born (None: none)."""
    if fork is None or observed.any_exists:
        return None
    return fork_json(fork, str(getattr(getattr(spec, "fork", None), "kernel", "running")))


def _create_message(name: str, desired: int, fork: ForkSourceLike | None) -> str:
    what = (f"forks it from gen {fork.generation} of {fork.parent}" if fork is not None
            else "creates it")
    return (f"lineage {name}: none of its places exist; apply {what} and runs "
            f"{_generations(desired)}")


def _not_selected(spec: PlanSpec) -> spec_sets.NotSelected | None:
    """The selection decision that stopped this set member (None: none; optional on the
    spec: ``reconciler.engine.epochs`` puts it in the member's place)."""
    found = getattr(getattr(spec, "member", None), "not_selected", None)
    return found if isinstance(found, spec_sets.NotSelected) else None


def _set_of(spec: PlanSpec) -> str | None:
    """The LineageSet the spec is a member of (None: a plain lineage; optional on the spec)."""
    found = getattr(spec, "set_name", None)
    return found if isinstance(found, str) else None


def plan_lineage(spec: PlanSpec, observed: ObservedState, instrument: Identity, *,
                 preflight: Preflight | None = None,
                 kernel: KernelFactsLike | None = None,
                 fork: ForkSourceLike | None = None) -> LineagePlan:
    """One lineage's action. Pure, but for ``preflight``.

    ``preflight`` (``reconciler.state.preflight.provider_problem``) says why the model
    could not be served here; it is asked only when generations would run. Without
    it the model's configuration is not checked (pure planning, in tests). ``kernel``
    (``state.kernel_store.lineage_facts``): the lineage's kernel is chosen by
    ``plan.kernel_choice.choose``; without it only this ouro's own kernel may run it. ``fork``
    (``state.forks.read_source``): the parent generation a fork yet to be born starts from.
    """
    name = spec.name
    desired = desired_generations(spec)
    have = observed.generations
    model = spec.model()
    heads = {"lineage": observed.lineage_head, "observation": observed.observation_head}
    # Optional on the observed state and the spec (Protocols stay minimal for fakes).
    running: str | None = getattr(observed, "running", None)
    labels = dict(getattr(spec, "labels", None) or {})
    notes = _notes(spec, observed, running, have, desired)

    # What could be read is reported even when the lineage is refused.
    changes = changes_against(spec, observed.last_observation)
    choice = choose(name, kernel) if kernel is not None else None
    born_from = _born_from(spec, observed, fork)

    def result(action: Action, message: str, *, reason: PlanReason | None = None,
               missing: int = 0) -> LineagePlan:
        return LineagePlan(
            name=name, action=action, reason=reason, message=message,
            observed_generations=have, desired_generations=desired,
            missing_generations=missing, max_spend_usd=_spend(missing, model),
            changes=changes, heads=heads, spec_sha256=spec.sha256,
            notes=tuple(notes),
            interrupted=observed.interrupted.kind if observed.interrupted else None,
            branches={"lineage": observed.paths.branch,
                      "observation": observed.paths.observation_branch},
            labels=labels, running=running, kernel=choice, fork=born_from,
            set_name=_set_of(spec),
            measure=MeasurementWork() if action == "refuse" else measurement_work(
                getattr(spec, "probes", ()), have + missing,
                getattr(observed, "probe_coverage", {})),
        )

    problem = preflight(model) if preflight is not None and _to_run(desired, observed) else None
    found = refusals(spec, observed, instrument, problem, choice, fork)
    if found:
        return dataclasses.replace(result("refuse", found[0].message, reason=found[0].reason),
                                   refusals=found)
    if (paused := _paused(spec, observed, desired)) is not None:
        return result("suspended", paused)
    if not observed.any_exists:
        return result("create", _create_message(name, desired, fork), missing=desired)
    if observed.interrupted is not None:
        after = have + (1 if observed.interrupted.kind == "roll-forward" else 0)
        missing = max(0, desired - after)
        now = running or observed.interrupted.detail  # another apply's work is no leftover
        return result(
            "recover", f"lineage {name}: {now}; then {_generations(missing, 'more ')}",
            missing=missing,
        )
    if (stop := until_of(spec, observed, have) if have < desired else None) is not None:
        return _done(result, stop, f"lineage {name}: {have} of {desired} generations")
    if have < desired:
        return result(
            "extend", f"lineage {name}: {have} of {desired} generations; apply runs "
            f"{desired - have} more", missing=desired - have,
        )
    return _settled(result, spec, notes, have, desired)


def _settled(result: Callable[..., LineagePlan], spec: PlanSpec, notes: list[str],
             have: int, desired: int) -> LineagePlan:
    """A lineage with every generation its spec asks for: in sync, stopped by a
    selection (``done``, not-selected), or ahead."""
    name = spec.name
    if (stop := _not_selected(spec)) is not None:
        return dataclasses.replace(result("done", f"lineage {name}: {have} of {desired} "
                                          f"generations; {stop.message}"), not_selected=stop)
    if have == desired:
        return result("in-sync", f"lineage {name}: {have} of {desired} generations, "
                      "nothing to do")
    notes.append("history is never removed: lower-than-observed targets are only reported")
    return result(
        "ahead", f"lineage {name}: {have} generations, more than the {desired} the spec "
        "asks for; nothing to do",
    )


def make_plan(items: Sequence[tuple[PlanSpec, ObservedState]], instrument: Identity, *,
              preflight: Preflight | None = None,
              kernels: Mapping[str, KernelFactsLike | None] | None = None,
              orphans: Sequence[Orphan] = (),
              forks: Mapping[str, ForkSourceLike | None] | None = None) -> Plan:
    """Every lineage's plan; ``kernels`` maps lineage names to their kernel facts, ``forks``
    to the sources of forks yet to be born; ``orphans`` (``find_orphans``) are shown beside
    their sets, never acted on."""
    known, sources = kernels or {}, forks or {}
    return plan_of([plan_lineage(spec, observed, instrument, preflight=preflight,
                                 kernel=known.get(spec.name), fork=sources.get(spec.name))
                    for spec, observed in items], instrument, orphans)


def plan_of(lineages: Sequence[LineagePlan], instrument: Identity,
            orphans: Sequence[Orphan] = ()) -> Plan:
    """The plan of these lineages' plans (``plan_lineage``'s), counted by action."""
    counts: dict[str, int] = dict.fromkeys(ACTIONS, 0)
    for item in lineages:
        counts[item.action] += 1
    return Plan(lineages=tuple(lineages), instrument=instrument, counts=counts,
                orphans=tuple(orphans))


def find_orphans(set_names: Sequence[str], known: Collection[str],
                 existing: Mapping[str, str]) -> list[Orphan]:
    """The lineages ``existing`` ({name: path}, found at the state dir's default places)
    that are named as members of one of ``set_names`` but are not ``known`` (the names of
    the run's specs). A name two sets could claim belongs to the longer set name."""
    patterns = sorted(((spec_sets.member_pattern(name), name) for name in set(set_names)),
                      key=lambda pair: -len(pair[1]))
    found: list[Orphan] = []
    for name in sorted(existing):
        if name in known:
            continue
        owner = next((set_name for pattern, set_name in patterns if pattern.match(name)), None)
        if owner is not None:
            found.append(Orphan(name, owner, existing[name]))
    return found
