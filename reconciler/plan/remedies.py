"""What a human should do about each refusal: one table, one home.

Rule: pure text. Every refusal the planner gives ends with a remedy from
``REMEDIES`` (keyed by reason; a variant of a reason is ``reason/variant``),
so that the words a person acts on are written once and can be read in one
place. Remedies may name values of the refusal (``{commit}``, ...), which the
planner fills in with ``remedy``.

A lineage's instrument is *ouro's* when its root metadata names this ouro's
repository (compared by repository name, so that an ssh and an https clone
agree); anything else (the original ouroboros instrument, above all) is
another instrument, whose lineages ouro reads and verifies but never extends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.kernel.base.config import Identity

__all__ = ["REMEDIES", "foreign_instrument", "instrument_name", "remedy"]

REMEDIES: Mapping[str, str] = {
    "spec-pin-mismatch": "run the ouro at {wanted}, or change spec.instrument.commit",
    "spec-pin-mismatch/existing": (
        "change spec.instrument.commit (a pin chooses the kernel of new lineages), or start "
        "a new lineage"
    ),
    "not-a-lineage": "point spec.storage at the lineage's places, or move what is there away",
    "branch-mismatch": (
        "check out the spec's branch in that repository, or set spec.storage.branch / "
        "observation_branch to the lineage's branches (or leave them unset: ouro then uses "
        "the branches the lineage records)"
    ),
    "no-metadata": (
        "ouro reads lineages of older instruments but never extends them; start a new lineage"
    ),
    "partial-paths": (
        "restore the missing places from a backup, or move the remaining ones away so that "
        "apply starts a new lineage"
    ),
    "instrument-commit-drift": "run the ouro at that commit, or start a new lineage",
    "instrument-commit-drift/foreign": (
        "ouro reads and verifies this lineage (plan, status, verify) but does not extend "
        "it: extend it with that instrument, or start a new lineage with ouro"
    ),
    "fingerprint-drift": "run an unmodified ouro at that commit, or start a new lineage",
    "foreign-kernel": (
        "ouro reads and verifies this lineage (plan, status, verify) but does not extend it "
        "(only that identical kernel could): extend it with that instrument, or start a new "
        "lineage with ouro"
    ),
    "foreign-kernel/no-kernel": "its physics are not ouro's; start a new lineage",
    "foreign-kernel/pin": "pin an ouro commit (one with a reconciler/kernel folder)",
    "foreign-kernel/entry": "use an ouro that speaks that entry point",
    "kernel-unavailable": (
        "run `{command}` (or --from a path, bundle or URL that has that commit), then "
        "apply again"
    ),
    "kernel-damaged": (
        "move the entry away (`chmod -R u+w {path} && rm -r {path}`), then `ouro kernel "
        "fetch COMMIT` or apply again (a kernel still in the local checkout is "
        "materialized again)"
    ),
    "observation-disagrees": (
        "run `ouro verify`, restore the observation repo that belongs to this lineage, or "
        "start a new lineage"
    ),
    "unbalanced": (
        "generation commits and observations disagree beyond recovery; run `ouro verify` "
        "for the details, restore both repos from a backup, or start a new lineage"
    ),
    "damaged": (
        "repair the place it names: put the lineage's own worktree folder back in place of "
        "the symlink; remove a branch lock if no git command is running on the lineage; "
        "restore an object that does not read whole from a clone or a backup"
    ),
    "generation-running": (
        "let that generation finish (or stop its process), then plan again"
    ),
    "provider-config": (
        "fix spec.model or the environment apply runs in, then plan again (nothing is "
        "created or run until then)"
    ),
}


def remedy(key: str, **values: Any) -> str:
    """The remedy for ``key`` (a reason, or ``reason/variant``), with ``values`` filled in."""
    return REMEDIES[key].format(**values)


def _repository_name(url: str) -> str:
    """``https://host/a/ouro.git`` / ``git@host:a/ouro`` / ``/srv/ouro/`` -> ``ouro``."""
    tail = url.strip().rstrip("/").replace(":", "/").rsplit("/", 1)[-1]
    return tail.removesuffix(".git").lower()


def foreign_instrument(metadata: Mapping[str, Any], me: Identity) -> bool:
    """Was the lineage born by an instrument that is not ouro (by its recorded repository)?"""
    repository = metadata.get("instrument_repository")
    if not isinstance(repository, str) or not repository.strip():
        return False  # unknown: say nothing we cannot back
    return _repository_name(repository) != _repository_name(me.repository)


def instrument_name(metadata: Mapping[str, Any]) -> str:
    """``REPOSITORY at REF (commit C)``, from a lineage's root metadata."""
    commit = metadata.get("instrument_commit")
    return (
        f"{metadata.get('instrument_repository') or 'an unnamed repository'} at "
        f"{metadata.get('instrument_ref') or 'an unknown ref'} "
        f"(commit {commit if isinstance(commit, str) else 'unknown'})"
    )
