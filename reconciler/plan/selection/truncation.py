"""Truncation: the best ``keep`` continue; the new members are forks of them, the best
first, in turn. No random choice. Pure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reconciler.plan.selection.decision import Candidate, Choice, rank
from reconciler.spec.selection import SelectionSpec

__all__ = ["choose"]


def choose(candidates: Sequence[Candidate], rule: SelectionSpec, size: int,
           rng: np.random.Generator) -> Choice:
    """Keep the top ``rule.keep``; ``size - keep`` new members from them, best first."""
    ranked = [one.name for one in rank(candidates, rule)]
    kept = tuple(ranked[:min(rule.keep or len(ranked), len(ranked), size)])
    born = max(size - len(kept), 0)
    return Choice(kept, tuple(kept[i % len(kept)] for i in range(born)) if kept else ())
