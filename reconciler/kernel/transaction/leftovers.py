"""What an interrupted generation left behind, and what recovery does with it. Trusted harness.

The one classifier of leftovers: ``recovery`` acts on it, ``generation`` refuses
to start over it, and the control plane's ``observe`` reports it, so a change to
the transaction (see ``generation``) is made here once. It decides from facts
its callers read (counts, the branch head, the intent marker, whether the newest
observation names the newest generation commit); ``pending_problem`` reads the
one fact that needs the lineage repository.

    observations = generations + 1, observation names C on top of the head
                                            roll-forward  (move the branch to C)
    observations = generations + 1, anything else            unbalanced
    observations != generations, or the newest observation
    does not name the newest generation commit               unbalanced
    no intent marker                                         none
    an unreadable marker                                     discard (generation + 1)
    a marker of the newest generation, its commit the head   cleanup (all was published)
    a marker of the next generation                          discard (it re-runs)
    a marker of any other generation                         stray-marker (for a human)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pygit2

from ..base.formats import parse_generation_subject

__all__ = ["ACTIONABLE", "LeftoverKind", "Leftovers", "classify_leftovers", "pending_problem"]

LeftoverKind = Literal["none", "roll-forward", "cleanup", "discard", "unbalanced", "stray-marker"]
ACTIONABLE: frozenset[LeftoverKind] = frozenset({"roll-forward", "cleanup", "discard"})


@dataclass(frozen=True)
class Leftovers:
    """``kind``; the generation and lineage commit it concerns (if known), the marker's
    phase, and a sentence saying what was found (no paths: the caller adds them)."""

    kind: LeftoverKind
    generation: int | None = None
    lineage_commit: str | None = None
    phase: str | None = None
    detail: str = ""


def pending_problem(lineage: pygit2.Repository, head: pygit2.Commit, named: object,
                    number: int) -> str | None:
    """Why observation ``number``'s lineage commit ``named`` cannot be rolled forward onto
    ``head`` (it must be gen ``number`` whose first parent is ``head``); None if it can."""
    if not isinstance(named, str):
        return f"observation {number} names no lineage commit"
    try:
        commit = lineage.get(named)
    except ValueError:
        commit = None
    if not isinstance(commit, pygit2.Commit):
        return f"observation {number} names {named}, which is not in the lineage"
    if not commit.parent_ids or str(commit.parent_ids[0]) != str(head.id):
        return f"observation {number} names {named}, whose parent is not the head of the branch"
    parsed = parse_generation_subject(commit.message)
    if parsed is None or parsed.number != number:
        return f"observation {number} names {named}, which is not gen {number}"
    return None


def _text(marker: Mapping[str, Any] | None, key: str) -> str | None:
    value = marker.get(key) if marker is not None else None
    return value if isinstance(value, str) else None


def classify_leftovers(
    *,
    generations: int,
    observed: int,
    head: str,
    newest_observed: bool,
    pending: str | None,
    pending_problem: str | None,
    marker_present: bool,
    marker: Mapping[str, Any] | None,
) -> Leftovers:
    """The leftovers of a lineage with ``generations`` generation commits (branch head
    ``head``) and ``observed`` generation observations.

    ``newest_observed``: observation ``generations`` names the newest generation commit
    (true when there is none). ``pending``/``pending_problem``: when there is one
    observation more than generations, the commit it names and ``pending_problem``'s
    answer for it. ``marker``: the intent marker when present and of its schema.
    """
    if observed == generations + 1:
        if pending_problem is None:
            return Leftovers("roll-forward", generations + 1, pending, _text(marker, "phase"),
                             f"observation {generations + 1} names {str(pending)[:12]}, "
                             "which is not yet on the branch")
        return Leftovers("unbalanced", generations + 1, pending, None, pending_problem)
    if observed != generations:
        return Leftovers("unbalanced", None, None, None,
                         f"{generations} generation commits but {observed} observations")
    if not newest_observed:
        return Leftovers("unbalanced", generations, None, None,
                         f"observation {generations} does not name gen {generations}")
    if not marker_present:
        return Leftovers("none")
    if marker is None:
        return Leftovers("discard", generations + 1, None, None, "the intent marker is unreadable")
    number = marker.get("generation")
    number = number if isinstance(number, int) and not isinstance(number, bool) else None
    phase = _text(marker, "phase")
    commit = _text(marker, "lineage_commit")
    if number == generations and generations and commit == head:
        return Leftovers("cleanup", generations, commit, phase,
                         f"generation {generations} was published; only its marker is left")
    if number == generations + 1:
        return Leftovers("discard", generations + 1, commit, phase,
                         f"generation {generations + 1} was interrupted "
                         f"({phase or 'unknown phase'}) before its observation was committed")
    return Leftovers("stray-marker", number, commit, phase,
                     f"the intent marker names generation {marker.get('generation')!r}, but "
                     f"the branch has {generations}")
