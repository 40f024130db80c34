"""MAP-Elites: each member falls in the bin its descriptors say (``numpy.digitize`` of
each descriptor's value over its edges); each occupied bin's best continues (its elite)
and the others stop; each new member's parent is the elite of an occupied bin drawn
uniformly from ``rng`` (bins in sorted order). Pure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reconciler.plan.selection.decision import Candidate, Choice, rank
from reconciler.spec.selection import SelectionSpec

__all__ = ["bin_of", "choose"]


def bin_of(candidate: Candidate, rule: SelectionSpec) -> tuple[int, ...]:
    """The bin of a measured candidate: one index per descriptor."""
    assert rule.map_elites is not None  # the spec requires it for this method
    found: list[int] = []
    for descriptor in rule.map_elites.descriptors:
        value = candidate.value(descriptor.by)
        assert value is not None  # decide() waits for every measurement first
        found.append(int(np.digitize(value, descriptor.bins)))
    return tuple(found)


def choose(candidates: Sequence[Candidate], rule: SelectionSpec, size: int,
           rng: np.random.Generator) -> Choice:
    """Each occupied bin keeps its best; ``size - elites`` parents drawn from the bins."""
    elites: dict[tuple[int, ...], str] = {}
    for one in rank(candidates, rule):  # the best of each bin comes first
        elites.setdefault(bin_of(one, rule), one.name)
    bins = sorted(elites)
    kept = tuple(elites[b] for b in bins)
    born = max(size - len(kept), 0)
    drawn = rng.integers(0, len(bins), size=born).tolist() if bins else []
    return Choice(kept, tuple(elites[bins[int(i)]] for i in drawn))
