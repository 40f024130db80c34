"""Desired vs observed -> actions, and saved plans. Pure.

Rule: no I/O in the planner (``planner``): inputs are a loaded spec, an observed
state (through Protocols, never importing ``state``) and this instrument's
identity; the output is what apply would do and, when it refuses, why and what
a human must do. ``saved`` reads and writes plan files (the one I/O edge here).

May import: ``spec``, ``kernel`` (its values), ``errors``, ``ownfiles`` (``saved``'s
write). Never ``state``, ``engine``, ``report`` or ``cli``.
"""

from reconciler.plan.planner import (
    ACTIONS,
    REASONS,
    Change,
    LineagePlan,
    ObservedState,
    Plan,
    PlanSpec,
    Refusal,
    changes_against,
    desired_generations,
    make_plan,
    plan_lineage,
    refusals,
)

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
    "refusals",
]
