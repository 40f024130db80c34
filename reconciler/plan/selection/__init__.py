"""Selection among a LineageSet's members at the end of an epoch (``spec.selection``).
Pure: a decision is a function of recorded values, the rule, the epoch and the seed.

Rule: the kernel never judges an organism; this package decides outside every life,
from the table's recorded values. One module per method, each a ``choose`` function
(``Method``); another method is one more file and one line in ``METHODS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from reconciler.plan.selection import map_elites, tournament, truncation
from reconciler.plan.selection.decision import (
    NOT_SELECTED,
    Birth,
    Candidate,
    Choice,
    Decision,
    born_name,
    rank,
    rng,
)
from reconciler.spec.selection import SelectionSpec

__all__ = [
    "METHODS",
    "NOT_SELECTED",
    "Birth",
    "Candidate",
    "Choice",
    "Decision",
    "Method",
    "born_name",
    "columns",
    "decide",
    "rank",
    "rng",
]


class Method(Protocol):
    def __call__(self, candidates: Sequence[Candidate], rule: SelectionSpec, size: int,
                 rng: np.random.Generator) -> Choice: ...


METHODS: dict[str, Method] = {
    "truncation": truncation.choose,
    "tournament": tournament.choose,
    "map-elites": map_elites.choose,
}


def columns(rule: SelectionSpec) -> tuple[str, ...]:
    """Every column the rule reads: ``by``, then MAP-Elites' descriptors."""
    found = [rule.by]
    if rule.method == "map-elites" and rule.map_elites is not None:
        found += [d.by for d in rule.map_elites.descriptors]
    return tuple(dict.fromkeys(found))


def decide(candidates: Sequence[Candidate], rule: SelectionSpec, epoch: int,
           generator: np.random.Generator, *, set_name: str, size: int) -> Decision:
    """The decision at the end of ``epoch`` among ``candidates`` (the living members),
    keeping the population at ``size``; it waits while a value it reads is missing."""
    missing = tuple(f"{one.name}: {column}" for one in sorted(candidates, key=lambda c: c.name)
                    for column in columns(rule) if one.value(column) is None)
    if missing or not candidates:
        return Decision(epoch, waits_for=missing or ("no living member",))
    choice = METHODS[rule.method](candidates, rule, size, generator)
    by_name = {one.name: one for one in candidates}
    values = {one.name: float(one.value(rule.by) or 0.0) for one in candidates}
    born = tuple(Birth(born_name(set_name, epoch + 1, i), parent,
                       by_name[parent].generation, values[parent])
                 for i, parent in enumerate(choice.parents))
    stopped = tuple(sorted(set(by_name) - set(choice.kept)))
    return Decision(epoch, choice.kept, stopped, born, values)
