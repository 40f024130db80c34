"""A fork's source at plan time: refused when it is no generation to start from. Pure.

Rule: a fork (``spec.from``) that is yet to be born is refused when its parent cannot
be read, has no such generation, or that generation is a death (its tree was never
published); each refusal names its reason and what to do. Once born, a fork is an
ordinary lineage: its ancestry is in its root metadata and the plan never reads its
parent again.

These reasons are the control plane's own (the kernel never gives them, so they are not
in its list, ``kernel.base.refusals``: docs/benchmarks.md, "Physics release 4"); the
plan gives a fork's refusal after the kernel's and a set member's (``plan.membership``).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, get_args

from reconciler.kernel.base.refusals import Reason
from reconciler.plan.membership import SetReason

__all__ = ["FORK_REASONS", "ForkReason", "ForkSourceLike", "PlanReason",
           "fork_json", "fork_notes", "fork_refusal"]

ForkReason = Literal["fork-unreadable", "fork-no-generation", "fork-death"]
FORK_REASONS: tuple[ForkReason, ...] = get_args(ForkReason)
PlanReason = Reason | SetReason | ForkReason

_REMEDIES: dict[str, str] = {
    "fork-unreadable": (
        "name the parent's spec in this run (or put it at <state dir>/{parent}), or run "
        "`ouro verify` on it"),
    "fork-no-generation": (
        "fork from a generation it has (spec.from.generation), or apply the parent first "
        "and plan again"),
    "fork-death": (
        "fork from the generation before the death, or another one that published"),
}


class ForkSourceLike(Protocol):
    """``reconciler.state.forks.ForkSource``."""

    @property
    def parent(self) -> str: ...
    @property
    def generation(self) -> int: ...
    @property
    def problem(self) -> ForkReason | None: ...
    @property
    def detail(self) -> str: ...
    @property
    def root(self) -> str | None: ...
    @property
    def commit(self) -> str | None: ...
    @property
    def kernel(self) -> dict[str, Any]: ...


def fork_refusal(name: str, source: ForkSourceLike) -> tuple[ForkReason, str] | None:
    """Why lineage ``name`` cannot be born from ``source`` (None: it can)."""
    if source.problem is None:
        return None
    return source.problem, (
        f"lineage {name}: cannot fork from gen {source.generation} of {source.parent}: "
        f"{source.detail}: " + _REMEDIES[source.problem].format(parent=source.parent))


def fork_json(source: ForkSourceLike, kernel: str) -> dict[str, Any]:
    """What a plan shows of a fork to be born."""
    return {"parent": source.parent, "generation": source.generation,
            "parent_root": source.root, "commit": source.commit, "kernel": kernel,
            "parent_kernel": source.kernel.get("commit")}


def fork_notes(spec_fork: Any, metadata: dict[str, Any] | None) -> list[str]:
    """A born lineage whose ``spec.from`` names another parent generation than the one it
    was forked from: said, never acted on (a fork's ancestry is fixed at its birth)."""
    record = (metadata or {}).get("ouro_fork")
    if spec_fork is None or not isinstance(record, dict):
        return []
    wanted = (getattr(spec_fork, "lineage", None), getattr(spec_fork, "generation", None))
    born = (record.get("parent"), record.get("generation"))
    if wanted == born:
        return []
    return [f"spec.from names gen {wanted[1]} of {wanted[0]}, but this lineage was forked "
            f"from gen {born[1]} of {born[0]} at its birth: a fork's ancestry never changes "
            "(fork under a new name to start from there)"]
