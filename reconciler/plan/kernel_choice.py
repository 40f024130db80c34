"""Which kernel runs a lineage: the running one, the store's, one materialized from git, or
none (refused). Pure.

The order is docs/kernel.md's "Pinned kernels": the running kernel when its
fingerprint is the recorded one and the recorded commit is known to have that
kernel (the running commit itself, a commit record in the store, or the
checkout's objects); else the store's verified entry; else the commit's kernel
tree from the local checkout's objects (materialized into the store by apply);
else refused ``kernel-unavailable`` with the command that would fetch it. A
recorded commit whose kernel fingerprints otherwise is ``fingerprint-drift``; a
lineage born by a kernel without ouro's entry point (the original instrument,
or an ouro from before pinned kernels) is extended only by an identical kernel,
else refused ``foreign-kernel``.

The facts come from ``reconciler.state.kernel_store.gather`` (described here by a
protocol: this layer never imports ``state``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from reconciler.kernel.base.config import ENTRY_REQUEST_SCHEMA, Identity
from reconciler.kernel.base.refusals import KernelReason
from reconciler.plan.remedies import instrument_name, remedy

__all__ = [
    "SOURCES",
    "SUPPORTED_ENTRIES",
    "KernelChoice",
    "KernelFactsLike",
    "choose",
    "fetch_command",
]

Source = Literal["running", "store", "materialized"]
SOURCES: tuple[Source, ...] = ("running", "store", "materialized")
# Entry-point request schemas this control plane speaks (engine.pinned).
SUPPORTED_ENTRIES = frozenset({ENTRY_REQUEST_SCHEMA})


class StoredLike(Protocol):
    @property
    def path(self) -> Path: ...
    @property
    def entry(self) -> str | None: ...


class KernelFactsLike(Protocol):
    """``reconciler.state.kernel_store.KernelFacts``."""

    @property
    def commit(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def entry(self) -> str | None: ...
    @property
    def repository(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    @property
    def running(self) -> Identity: ...
    @property
    def store(self) -> Path: ...
    @property
    def commit_fingerprint(self) -> str | None: ...
    @property
    def commit_known_from(self) -> str | None: ...
    @property
    def stored(self) -> StoredLike | None: ...
    @property
    def damaged(self) -> str | None: ...
    @property
    def for_birth(self) -> bool: ...


@dataclass(frozen=True)
class KernelChoice:
    """The kernel that will run a lineage, or why none can."""

    commit: str
    fingerprint: str
    source: Source | None  # None: refused
    reason: KernelReason | None
    message: str  # what runs, or why nothing can and what to do
    fetch: str | None = None  # the command that would make it available

    def as_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "fingerprint": self.fingerprint, "source": self.source,
                "reason": self.reason, "fetch": self.fetch}


def _short(value: str) -> str:
    return f"{value[:12]}…" if value else "unknown"


def fetch_command(commit: str, repository: str) -> str:
    """The command that fetches ``commit``'s kernel into the store."""
    return f"ouro kernel fetch {commit} --from {repository}"


def _refuse(facts: KernelFactsLike, reason: KernelReason, message: str,
            fetch: str | None = None) -> KernelChoice:
    return KernelChoice(facts.commit, facts.fingerprint, None, reason, message, fetch)


def _use(facts: KernelFactsLike, source: Source, fingerprint: str = "") -> KernelChoice:
    fingerprint = fingerprint or facts.fingerprint
    where = {
        "running": "this ouro's own kernel, in-process",
        "store": "from the kernel store",
        "materialized": "materialized from the local checkout's git objects into the store",
    }[source]
    return KernelChoice(facts.commit, fingerprint, source, None,
                        f"kernel {_short(facts.commit)} ({_short(fingerprint)}): {where}")


def _unavailable(name: str, facts: KernelFactsLike) -> KernelChoice:
    command = fetch_command(facts.commit, facts.repository)
    return _refuse(
        facts, "kernel-unavailable",
        f"lineage {name} needs kernel {facts.commit} (fingerprint "
        f"{facts.fingerprint or 'unknown'}), which is neither this ouro's, in the kernel "
        f"store, nor in the local checkout's git objects: "
        + remedy("kernel-unavailable", command=command),
        command,
    )


def _damaged(name: str, facts: KernelFactsLike) -> KernelChoice:
    path = facts.store / (facts.fingerprint or "FINGERPRINT")
    return _refuse(facts, "kernel-damaged",
                   f"lineage {name}: {facts.damaged}: " + remedy("kernel-damaged", path=path))


def _choose_birth(name: str, facts: KernelFactsLike) -> KernelChoice:
    if facts.commit_fingerprint == facts.running.fingerprint:
        return _use(facts, "running", facts.running.fingerprint)
    if facts.commit_fingerprint == "":
        return _refuse(facts, "foreign-kernel",
                       f"lineage {name}: spec.instrument.commit {facts.commit} has no ouro "
                       "kernel: " + remedy("foreign-kernel/pin"))
    if facts.damaged:
        return _damaged(name, facts)
    if facts.stored is not None:
        return _use(facts, "store")
    if facts.commit_known_from == "checkout":
        return _use(facts, "materialized", facts.commit_fingerprint or "")
    return _unavailable(name, facts)


def choose(name: str, facts: KernelFactsLike) -> KernelChoice:
    """The kernel for lineage ``name``, in the order above. Pure."""
    if facts.for_birth:
        return _choose_birth(name, facts)
    running = facts.running
    known = facts.commit_fingerprint
    if facts.fingerprint == running.fingerprint and known == facts.fingerprint:
        return _use(facts, "running")
    if known == "":
        return _refuse(facts, "foreign-kernel",
                       f"lineage {name} was born under {facts.commit}, a commit without an "
                       "ouro kernel: " + remedy("foreign-kernel/no-kernel"))
    if known is not None and known != facts.fingerprint:
        return _refuse(
            facts, "fingerprint-drift",
            f"lineage {name} records kernel fingerprint {_short(facts.fingerprint)} for "
            f"commit {_short(facts.commit)}, whose kernel files fingerprint as "
            f"{_short(known)} (same commit, different physics): "
            + remedy("fingerprint-drift"))
    if facts.entry is None and facts.fingerprint != running.fingerprint:
        return _refuse(
            facts, "foreign-kernel",
            f"lineage {name} was born by {instrument_name(facts.metadata)} (fingerprint "
            f"{_short(facts.fingerprint)}), whose kernel is not an ouro kernel with an entry "
            "point (the original instrument, or an ouro from before pinned kernels), and "
            f"this ouro's kernel is not identical to it ({_short(running.fingerprint)}): "
            + remedy("foreign-kernel"))
    if facts.entry is not None and facts.entry not in SUPPORTED_ENTRIES:
        return _refuse(
            facts, "foreign-kernel",
            f"lineage {name}: its kernel's entry point speaks {facts.entry}, which this ouro "
            f"does not ({', '.join(sorted(SUPPORTED_ENTRIES))}): " + remedy("foreign-kernel/entry"))
    if facts.damaged:
        return _damaged(name, facts)
    if facts.stored is not None:
        return _use(facts, "store")
    if facts.commit_known_from == "checkout" and facts.entry is not None:
        return _use(facts, "materialized")
    return _unavailable(name, facts)
