"""A fork's parent (``spec.from``): what no plan can change is refused here (a lineage
forking itself, forks in a circle, ``kernel: parent`` with an instrument pin), and each
fork is given its parent's places: the run's spec of that name, else the state dir's
default places of that name (branches as the lineage records them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from reconciler.errors import Problem
from reconciler.spec.loaded import LoadedSpec, ParentPlaces, default_places
from reconciler.spec.positions import locate, problem
from reconciler.spec.sources import Document
from reconciler.statedir import state_dir

__all__ = ["state_dir_or_none", "with_parents"]


def state_dir_or_none(explicit: Path | None) -> Path | None:
    """The state dir (``reconciler.statedir``), or None when it cannot be found."""
    try:
        return state_dir(explicit)
    except (RuntimeError, KeyError, OSError, ValueError):
        return None


def _fork_problem(spec: LoadedSpec, by_name: dict[str, LoadedSpec]) -> tuple[str, str] | None:
    """What is wrong with a fork's ``spec.from`` that no plan can change: (field, message)."""
    fork = spec.fork
    if fork is None:
        return None
    if fork.lineage == spec.name:
        return "lineage", "a lineage cannot fork itself: name another lineage"
    if fork.kernel == "parent" and spec.instrument_pin:
        return "kernel", ("kernel: parent births the fork under the parent's kernel, and "
                          "spec.instrument.commit pins another: keep one of the two")
    seen, parent = {spec.name}, by_name.get(fork.lineage)
    while parent is not None and parent.fork is not None:  # a cycle is never born
        if parent.name in seen or parent.fork.lineage in seen:
            return "lineage", (f"forks in a circle ({spec.name} -> {fork.lineage} -> ... -> "
                               f"{spec.name}): one of them must start from a lineage that "
                               "is not a fork of the others")
        seen.add(parent.name)
        parent = by_name.get(parent.fork.lineage)
    return None


def with_parents(documents: list[Document], loaded: list[LoadedSpec],
                 problems: list[Problem], state_dir: Path | None) -> list[LoadedSpec]:
    """Each fork with its parent's places: the run's spec of that name, else the state
    dir's default places of that name (branches as the lineage records them)."""
    by_name = {spec.name: spec for spec in loaded}
    result: list[LoadedSpec] = []
    for document, spec in zip(documents, loaded, strict=True):
        fork = spec.fork
        if fork is None:
            result.append(spec)
            continue
        found = _fork_problem(spec, by_name)
        if found is not None:
            problems.append(problem(
                document.source.shown,
                *locate(document.node, ("spec", "from", found[0]), key=False),
                f"spec.from.{found[0]}", document.member_of() + found[1]))
        sibling = by_name.get(fork.lineage)
        if sibling is not None:
            parent = ParentPlaces(sibling.paths(), sibling.declared_branch,
                                  sibling.declared_observation_branch)
        else:
            home = state_dir_or_none(state_dir)
            if home is None:
                problems.append(problem(
                    document.source.shown,
                    *locate(document.node, ("spec", "from", "lineage"), key=False),
                    "spec.from.lineage", document.member_of() + "the parent is not a spec "
                    "of this run and the state dir cannot be found: name the parent's spec "
                    "too, or set --state-dir or OURO_STATE_DIR"))
                result.append(spec)
                continue
            parent = ParentPlaces(default_places(home / fork.lineage, fork.lineage))
        result.append(dataclasses.replace(spec, fork_parent=parent))
    return result


