"""A selection's inputs and outputs: the candidates, the rule, the decision. Pure.

Rule: a decision is a pure function of the candidates (each member's name, generation
and recorded values), the rule (``spec.selection``), the epoch and the generator
``rng(seed, epoch)``; nothing else. Every random choice of epoch ``e`` is drawn from
``numpy.random.default_rng([seed, e])``, so the same record decides the same again and
``ouro verify`` can recompute it.

Ranking: better first (higher ``by`` unless ``lowest``), ties broken by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reconciler.spec.selection import SelectionSpec
from reconciler.spec.sets import NOT_SELECTED

__all__ = [
    "NOT_SELECTED",
    "Birth",
    "Candidate",
    "Choice",
    "Decision",
    "born_name",
    "rank",
    "rng",
]


@dataclass(frozen=True)
class Candidate:
    """A living member at the end of an epoch: its last generation and the values the
    rule reads there (column -> value; None: not measured). ``digests``: the probe
    records the values came from (probe name -> digest), carried into the record."""

    name: str
    generation: int
    values: Mapping[str, Any]
    digests: Mapping[str, str] = field(default_factory=dict)

    def value(self, column: str) -> float | None:
        found = self.values.get(column)
        if isinstance(found, bool) or not isinstance(found, int | float):
            return None
        return float(found)


@dataclass(frozen=True)
class Birth:
    """A new member: a fork of ``parent`` at its generation ``generation``."""

    name: str
    parent: str
    generation: int
    value: float  # the parent's fitness that chose it


@dataclass(frozen=True)
class Choice:
    """What a method chose: the members that continue (in its order) and, one per new
    member, the parent each is forked from."""

    kept: tuple[str, ...]
    parents: tuple[str, ...]


@dataclass(frozen=True)
class Decision:
    """The end of epoch ``epoch``: who is kept, stopped (``not-selected``) and born into
    epoch ``epoch + 1``; or, when ``waits_for`` names measurements (``member: column``),
    nothing yet."""

    epoch: int
    kept: tuple[str, ...] = ()
    stopped: tuple[str, ...] = ()
    born: tuple[Birth, ...] = ()
    values: Mapping[str, float] = field(default_factory=dict)  # member -> fitness used
    waits_for: tuple[str, ...] = ()

    @property
    def waiting(self) -> bool:
        return bool(self.waits_for)

    def as_json(self) -> dict[str, Any]:
        """The decision as plan, record and verify write it."""
        return {"epoch": self.epoch, "kept": list(self.kept), "stopped": list(self.stopped),
                "born": [{"name": b.name, "parent": b.parent, "generation": b.generation,
                          "value": b.value} for b in self.born],
                "values": dict(sorted(self.values.items())),
                "waits_for": list(self.waits_for)}


def rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of every random choice at the end of ``epoch``."""
    return np.random.default_rng([seed, epoch])


def rank(candidates: Sequence[Candidate], rule: SelectionSpec) -> list[Candidate]:
    """Best first by ``rule.by`` (every candidate measured), ties broken by name."""
    sign = 1.0 if rule.lowest else -1.0

    def key(one: Candidate) -> tuple[float, str]:
        value = one.value(rule.by)
        assert value is not None  # decide() waits for every measurement first
        return sign * value, one.name
    return sorted(candidates, key=key)


def born_name(set_name: str, epoch: int, index: int) -> str:
    """The name of the ``index``-th member born into ``epoch``."""
    return f"{set_name}-e{epoch}-{index}"
