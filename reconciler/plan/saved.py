"""A saved plan (`ouro plan -o FILE`): what was decided, and against which heads.

A saved plan is applied only while the world is as it was when it was made:
every lineage's branch heads, this instrument, and the spec documents (by
digest). ``check_fresh`` names every lineage and ref that moved, so that apply
can refuse a stale plan instead of acting on a picture that no longer holds.
The file is versioned JSON, written atomically (temp file, then rename).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Protocol

from reconciler.envelope import envelope
from reconciler.errors import PlanFileError, host_fault
from reconciler.kernel.base.config import Identity
from reconciler.ownfiles import write_atomic
from reconciler.plan import ACTIONS, Plan
from reconciler.spec.files import FileRefused, read_limited

__all__ = [
    "MAX_PLAN_BYTES",
    "PLANFILE_FORMAT",
    "HeadsLike",
    "SavedLineage",
    "SavedPlan",
    "check_fresh",
    "load_plan",
    "plan_file_document",
    "save_plan",
]

PLANFILE_FORMAT = "ouro-plan-file/v1"
# A plan names each lineage's heads and a few fields: ~1 KB per lineage.
MAX_PLAN_BYTES = 64 << 20


class HeadsLike(Protocol):
    """What freshness needs of an observed lineage (``reconciler.state.observe.Observed``)."""

    @property
    def lineage_head(self) -> str | None: ...
    @property
    def observation_head(self) -> str | None: ...


@dataclass(frozen=True)
class SavedLineage:
    name: str
    action: str
    reason: str | None
    observed_generations: int
    desired_generations: int
    missing_generations: int
    max_spend_usd: Decimal
    lineage_head: str | None
    observation_head: str | None
    lineage_branch: str | None
    observation_branch: str | None
    spec_sha256: str
    spec_file: str | None
    spec_document_index: int | None


@dataclass(frozen=True)
class SavedPlan:
    format: str
    created_at: str
    instrument_commit: str
    instrument_fingerprint: str
    lineages: tuple[SavedLineage, ...]

    def lineage(self, name: str) -> SavedLineage | None:
        return next((item for item in self.lineages if item.name == name), None)


def plan_file_document(plan: Plan, specs: Sequence[object] = (),
                       *, created_at: str | None = None) -> dict[str, Any]:
    """The saved plan. ``specs`` (LoadedSpec, optional) add where each spec came from."""
    from datetime import UTC, datetime

    origin: dict[str, tuple[str | None, int | None]] = {}
    for spec in specs:
        name = getattr(spec, "name", None)
        file = getattr(spec, "file", None)
        index = getattr(spec, "document_index", None)
        if isinstance(name, str):
            origin[name] = (str(file) if file is not None else None,
                            index if isinstance(index, int) else None)
    return {
        "format": PLANFILE_FORMAT,  # what the reader checks; beside it, the envelope
        **envelope("ouro-plan-file"),
        "created_at": created_at or datetime.now(UTC).isoformat(timespec="seconds"),
        "instrument": {"commit": plan.instrument.commit,
                       "fingerprint": plan.instrument.fingerprint},
        "lineages": [
            {
                "name": item.name,
                "action": item.action,
                "reason": item.reason,
                "observed_generations": item.observed_generations,
                "desired_generations": item.desired_generations,
                "missing_generations": item.missing_generations,
                "max_spend_usd": str(item.max_spend_usd),
                "heads": {"lineage": item.heads.get("lineage"),
                          "observation": item.heads.get("observation")},
                "branches": {"lineage": item.branches.get("lineage"),
                             "observation": item.branches.get("observation")},
                "spec_sha256": item.spec_sha256,
                "spec_file": origin.get(item.name, (None, None))[0],
                "spec_document_index": origin.get(item.name, (None, None))[1],
            }
            for item in plan.lineages
        ],
    }


def save_plan(plan: Plan, path: Path, specs: Sequence[object] = ()) -> None:
    """Write the plan atomically (``ownfiles.write_atomic``): a failure leaves no partial
    file, and a target that is not a regular file (``/dev/full``, a FIFO) is refused."""
    text = json.dumps(plan_file_document(plan, specs), indent=2, ensure_ascii=False) + "\n"
    target = Path(os.path.realpath(path))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, text.encode("utf-8"), what="the plan file", follow=True,
                     sync=True)
    except OSError as error:
        fault = host_fault(error, f"saving the plan to {path}")
        if fault is not None:
            raise fault from error
        raise PlanFileError(f"ouro: cannot write the plan to {path}: {error}") from error


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PlanFileError(f"ouro: {where}: field {key!r} is missing or of the wrong type")
    return value


def _optional_str(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise PlanFileError(f"ouro: {where}: field {key!r} must be text or null")
    return value


def load_plan(path: Path) -> SavedPlan:
    """Read a saved plan, type-checking every field; PlanFileError if unreadable."""
    try:
        data = json.loads(read_limited(path, MAX_PLAN_BYTES, "a plan file").decode("utf-8"))
    except (FileRefused, ValueError) as error:
        raise PlanFileError(f"ouro: cannot read the plan file {path}: {error}") from error
    except RecursionError as error:  # [[[[... : json recurses once per level
        raise PlanFileError(
            f"ouro: cannot read the plan file {path}: nested too deeply to be a plan; "
            "make it again with `ouro plan PATH -o FILE`"
        ) from error
    where = str(path)
    if not isinstance(data, dict) or data.get("format") != PLANFILE_FORMAT:
        raise PlanFileError(f"ouro: {where} is not an {PLANFILE_FORMAT} plan file")
    instrument = _field(data, "instrument", dict, where)
    lineages: list[SavedLineage] = []
    for index, raw in enumerate(_field(data, "lineages", list, where)):
        at = f"{where}: lineages[{index}]"
        if not isinstance(raw, dict):
            raise PlanFileError(f"ouro: {at} is not an object")
        heads = _field(raw, "heads", dict, at)
        raw_branches = raw.get("branches")
        branches: dict[str, Any] = raw_branches if isinstance(raw_branches, dict) else {}
        action = _field(raw, "action", str, at)
        if action not in ACTIONS:
            raise PlanFileError(f"ouro: {at}: unknown action {action!r}")
        try:
            spend = Decimal(_field(raw, "max_spend_usd", str, at))
        except InvalidOperation as error:
            raise PlanFileError(f"ouro: {at}: max_spend_usd is not a number") from error
        document_index = raw.get("spec_document_index")
        lineages.append(SavedLineage(
            name=_field(raw, "name", str, at),
            action=action,
            reason=_optional_str(raw, "reason", at),
            observed_generations=_field(raw, "observed_generations", int, at),
            desired_generations=_field(raw, "desired_generations", int, at),
            missing_generations=_field(raw, "missing_generations", int, at),
            max_spend_usd=spend,
            lineage_head=_optional_str(heads, "lineage", at),
            observation_head=_optional_str(heads, "observation", at),
            lineage_branch=_optional_str(branches, "lineage", at),
            observation_branch=_optional_str(branches, "observation", at),
            spec_sha256=_field(raw, "spec_sha256", str, at),
            spec_file=_optional_str(raw, "spec_file", at),
            spec_document_index=document_index if isinstance(document_index, int) else None,
        ))
    return SavedPlan(
        format=PLANFILE_FORMAT,
        created_at=_field(data, "created_at", str, where),
        instrument_commit=_field(instrument, "commit", str, where),
        instrument_fingerprint=_field(instrument, "fingerprint", str, where),
        lineages=tuple(lineages),
    )


def check_fresh(
    plan: SavedPlan,
    observed_now: Mapping[str, HeadsLike],
    *,
    instrument: Identity | None = None,
    spec_digests: Mapping[str, str] | None = None,
) -> list[str]:
    """Why the saved plan is stale: one line per lineage and ref that moved; [] if fresh."""
    stale: list[str] = []
    if instrument is not None and (
        instrument.commit != plan.instrument_commit
        or instrument.fingerprint != plan.instrument_fingerprint
    ):
        stale.append(
            f"instrument: the plan was made by {plan.instrument_commit[:12]} (fingerprint "
            f"{plan.instrument_fingerprint[:12]}); this ouro is {instrument.commit[:12]} "
            f"(fingerprint {instrument.fingerprint[:12]})"
        )
    for saved in plan.lineages:
        now = observed_now.get(saved.name)
        if now is None:
            stale.append(f"lineage {saved.name}: in the plan but not observed now")
            continue
        for ref, branch, then, current in (
            ("lineage", saved.lineage_branch, saved.lineage_head, now.lineage_head),
            ("observation", saved.observation_branch, saved.observation_head,
             now.observation_head),
        ):
            if then != current:
                name = f"refs/heads/{branch}" if branch else f"the {ref} branch"
                stale.append(
                    f"lineage {saved.name}: {name} moved from {then or 'nothing'} "
                    f"to {current or 'nothing'} since the plan was made"
                )
        if spec_digests is not None:
            digest = spec_digests.get(saved.name)
            if digest is None:
                stale.append(f"lineage {saved.name}: its spec is no longer loaded")
            elif digest != saved.spec_sha256:
                stale.append(f"lineage {saved.name}: its spec changed since the plan was made")
    for name in sorted(set(observed_now) - {item.name for item in plan.lineages}):
        stale.append(f"lineage {name}: observed now but not in the plan")
    return stale
