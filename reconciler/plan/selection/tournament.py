"""Tournament: for each of the next epoch's ``size`` places, ``tournament.size`` members
are drawn without replacement and the best wins the place. A member that wins at least
once continues (once); each further place it wins is a new member forked from it. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reconciler.plan.selection.decision import Candidate, Choice, rank
from reconciler.spec.selection import SelectionSpec

__all__ = ["choose"]


def choose(candidates: Sequence[Candidate], rule: SelectionSpec, size: int,
           rng: np.random.Generator) -> Choice:
    """``size`` tournaments among the candidates (in name order) drawn from ``rng``."""
    assert rule.tournament is not None  # the spec requires it for this method
    pool = sorted(candidates, key=lambda one: one.name)
    place = {one.name: i for i, one in enumerate(rank(pool, rule))}  # 0: the best
    drawn = min(rule.tournament.size, len(pool))
    winners: list[str] = []
    for _ in range(size):
        picks = rng.choice(len(pool), size=drawn, replace=False)
        winners.append(min((pool[int(i)].name for i in picks), key=place.__getitem__))
    kept = tuple(dict.fromkeys(winners))
    parents: list[str] = []
    seen: set[str] = set()
    for name in winners:
        if name in seen:
            parents.append(name)
        seen.add(name)
    return Choice(kept, tuple(parents))
