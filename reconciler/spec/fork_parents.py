"""A fork's parent (``spec.from``): a set's member named by set, cell and replica is found
among the run's members, what no plan can change is refused here (a lineage forking
itself, forks in a circle, ``kernel: parent`` with an instrument pin), and each fork is
given its parent's places: the run's spec of that name, else the state dir's
default places of that name (branches as the lineage records them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from reconciler.errors import Problem
from reconciler.spec.loaded import LoadedSpec, ParentPlaces, default_places
from reconciler.spec.models import ForkSpec
from reconciler.spec.positions import locate, problem
from reconciler.spec.sources import Document
from reconciler.statedir import state_dir

__all__ = ["state_dir_or_none", "with_parents"]

_MISSING = object()


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


def _value_at(values: dict[str, Any], path: str) -> Any:
    """The value a cell has at ``path``: a matrix key, or a field path inside one's value
    (``model.name`` in a ``model`` key's mapping); ``_MISSING`` when it has none."""
    for key, value in values.items():
        if path == key:
            return value
        if path.startswith(key + "."):
            for part in path[len(key) + 1:].split("."):
                if not isinstance(value, dict) or part not in value:
                    return _MISSING
                value = value[part]
            return value
    return _MISSING


def _set_member(fork: ForkSpec, loaded: list[LoadedSpec]) -> tuple[str, str]:
    """``spec.from``'s set member: ("", its name), or (the field at fault, the problem)."""
    members = [spec for spec in loaded if spec.member is not None
               and spec.member.set_name == fork.set and not spec.member.orphaned]
    if not members:
        return "set", (f"no LineageSet {fork.set!r} is a spec of this run: name its spec "
                       "too, or name the parent member itself with lineage")
    wanted = fork.cell or {}
    cells: dict[str | None, dict[str, Any]] = {}
    for spec in members:
        assert spec.member is not None
        values = spec.member.matrix
        if all(_value_at(values, path) == value for path, value in wanted.items()):
            cells.setdefault(spec.member.cell, values)
    if len(cells) != 1:
        known = sorted({key for spec in members if spec.member for key in spec.member.matrix})
        how = "no cell" if not cells else f"{len(cells)} cells"
        return "cell", (f"matches {how} of set {fork.set!r} (its matrix keys: "
                        f"{', '.join(known) or 'none'}): give the values of exactly one cell")
    (cell,) = cells
    for spec in members:
        assert spec.member is not None
        if spec.member.cell == cell and spec.member.replica == fork.replica:
            return "", spec.name
    count = sum(1 for spec in members if spec.member and spec.member.cell == cell)
    return "replica", (f"the cell has replicas 0 to {count - 1} in set {fork.set!r}: name "
                       "one of them")


def _by_member(documents: list[Document], loaded: list[LoadedSpec],
               problems: list[Problem]) -> list[LoadedSpec]:
    """Each fork that names a set's member, given that member's name as its parent."""
    result: list[LoadedSpec] = []
    for document, spec in zip(documents, loaded, strict=True):
        fork = spec.fork
        if fork is None or fork.set is None:
            result.append(spec)
            continue
        field, found = _set_member(fork, loaded)
        if field:
            problems.append(problem(
                document.source.shown,
                *locate(document.node, ("spec", "from", field), key=False),
                f"spec.from.{field}", document.member_of() + found))
            result.append(spec)
            continue
        body = spec.spec.spec.model_copy(update={"from_": fork.model_copy(
            update={"lineage": found})})
        result.append(dataclasses.replace(
            spec, spec=spec.spec.model_copy(update={"spec": body})))
    return result


def with_parents(documents: list[Document], loaded: list[LoadedSpec],
                 problems: list[Problem], state_dir: Path | None) -> list[LoadedSpec]:
    """Each fork with its parent's places: the run's spec of that name, else the state
    dir's default places of that name (branches as the lineage records them)."""
    loaded = _by_member(documents, loaded, problems)
    by_name = {spec.name: spec for spec in loaded}
    result: list[LoadedSpec] = []
    for document, spec in zip(documents, loaded, strict=True):
        fork = spec.fork
        if fork is None or not fork.lineage:  # no lineage: its set's member is not found
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


