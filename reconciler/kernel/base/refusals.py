"""Why ouro refuses to extend a lineage: the one typed list of refusal reasons.

Rule: every refusal reason any layer gives is a member of ``Reason``, declared
here once: the kernel's drift and damage errors (``errors.DriftError.reason``),
the problems reading a lineage's places finds (``reconciler.state.observe``),
the kernel choice's refusals (``reconciler.plan.kernel_choice``) and the plan's
(``reconciler.plan.planner``, which checks them in ``REASONS``' order, most
fundamental first). The sub-lists say which layer gives which; a test keeps
each inside ``REASONS``. Plain values, no I/O.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "KERNEL_ONLY",
    "REASONS",
    "KernelReason",
    "KernelRefusal",
    "ProblemCode",
    "Reason",
    "as_kernel_refusal",
]

# Every reason a plan may refuse a lineage for, in the order a refusal lists them.
Reason = Literal[
    "spec-pin-mismatch",
    "not-a-lineage",
    "branch-mismatch",
    "no-metadata",
    "partial-paths",
    "instrument-commit-drift",
    "fingerprint-drift",
    "foreign-kernel",
    "kernel-unavailable",
    "kernel-damaged",
    "observation-disagrees",
    "unbalanced",
    "damaged",
    "generation-running",
    "provider-config",  # (last: the refusal order is this order)
]
REASONS: tuple[Reason, ...] = get_args(Reason)

# What reading a lineage's places finds (``reconciler.state.observe``).
ProblemCode = Literal[
    "partial-paths",
    "not-a-lineage",
    "branch-mismatch",
    "no-metadata",
    "observation-disagrees",
    "unbalanced",
    "damaged",
    "generation-running",
]

# The kernel choice's refusals (``reconciler.plan.kernel_choice``).
KernelReason = Literal["kernel-unavailable", "kernel-damaged", "fingerprint-drift",
                       "foreign-kernel"]

# What the kernel itself refuses a generation for, at run time (``DriftError`` and
# ``DamageError``): the plan's reasons, and two only the kernel can see, the moment it
# takes the lineage's lock: metadata edited since the lineage's birth, and a repository
# damaged beneath it.
KernelRefusal = Literal[
    "branch-mismatch",
    "no-metadata",
    "instrument-commit-drift",
    "fingerprint-drift",
    "observation-disagrees",
    "unbalanced",
    "damaged",
    "metadata-edited",
    "repository-damaged",
]
KERNEL_ONLY: tuple[KernelRefusal, ...] = ("metadata-edited", "repository-damaged")
_KERNEL_REFUSALS: tuple[KernelRefusal, ...] = get_args(KernelRefusal)


def as_kernel_refusal(text: object, default: KernelRefusal) -> KernelRefusal:
    """A reason a kernel gave (perhaps another kernel's, read from its entry point's
    outcome), typed: one of ``KernelRefusal``, else ``default``."""
    for reason in _KERNEL_REFUSALS:
        if text == reason:
            return reason
    return default
