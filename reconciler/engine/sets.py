"""A LineageSet seen whole: its members grouped by cell, and the members it no longer has.
Read-only.

Rule: a lineage is an orphan of set S when it lives at the state dir's default places
(``NAME``, ``NAME.git``, ``NAME.observations``), its name is one S's members are given
(``reconciler.spec.sets.member_pattern``) and no spec of the run names it. It is shown,
never changed: history is never removed. ``ouro plan``, ``status``, ``log`` and
``export`` find orphans here, so that they all name the same ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.engine.epochs import expand
from reconciler.errors import StateError
from reconciler.kernel.base.config import LineagePaths
from reconciler.plan.planner import Orphan, find_orphans
from reconciler.spec.fork_parents import state_dir_or_none
from reconciler.spec.load import LoadedSpec, default_places, load_specs
from reconciler.spec.sets import Membership, member_pattern, orphan_membership
from reconciler.state.branches import resolve, spec_paths
from reconciler.state.fleet import Lineage, find_lineages, fleet
from reconciler.statedir import state_dir as resolve_state_dir

__all__ = ["Shown", "find_named", "grouped", "set_names", "set_orphans"]


def set_orphans(loaded: Sequence[LoadedSpec], chosen: Sequence[LoadedSpec],
                state_dir: Path | None) -> list[Orphan]:
    """The orphans of the sets of ``chosen`` (``loaded``: every spec of the run)."""
    names = [spec.set_name for spec in chosen if spec.set_name is not None]
    if not names:
        return []
    try:
        folder = resolve_state_dir(state_dir)
        entries = os.listdir(folder)
    except (OSError, RuntimeError, KeyError, ValueError):
        return []  # no state dir to look in: no orphans to show
    known = {spec.name for spec in loaded}
    existing: dict[str, str] = {}
    for name in entries:
        if name in known or name.startswith(".") or name.endswith((".git", ".observations")):
            continue
        places = default_places(folder / name, name)
        if places.git_dir.is_dir() and places.observations.is_dir():
            existing[name] = str(places.worktree)
    return find_orphans(names, known, existing)


@dataclass(frozen=True)
class Shown:
    """A lineage to show, with where it sits in its set (None: not in a set)."""

    name: str
    paths: LineagePaths
    member: Membership | None = None
    spec: LoadedSpec | None = None  # None: an orphan, or a lineage found without a spec


def set_names(loaded: Sequence[LoadedSpec]) -> list[str]:
    """The sets of these specs, in spec order."""
    return list(dict.fromkeys(spec.set_name for spec in loaded if spec.set_name is not None))


def grouped(loaded: Sequence[LoadedSpec], chosen: Sequence[LoadedSpec],
            state_dir: Path | None,
            where: Callable[[LoadedSpec], LineagePaths] = spec_paths) -> list[Shown]:
    """``chosen``'s lineages as status, log and export show them: spec order, except that
    each set's members are together, cell by cell (the cells in spec order, each cell's
    replicas by index), its orphans in their cells (a removed value's cells last).
    ``where``: where a spec's lineage lives (``spec_paths``, or an observation's answer)."""
    shown = [Shown(spec.name, where(spec), spec.member, spec) for spec in chosen]
    orphans = set_orphans(loaded, chosen, state_dir)
    cells: dict[str, dict[str | None, dict[str, Any]]] = {}
    for spec in loaded:
        if spec.member is not None:
            cells.setdefault(spec.member.set_name, {})[spec.member.cell] = spec.member.matrix
    for orphan in orphans:
        paths = resolve(default_places(Path(orphan.path), orphan.name), declared_branch=None,
                        declared_observation_branch=None)
        member = orphan_membership(orphan.set_name, orphan.name,
                                   cells.get(orphan.set_name, {}))
        shown.append(Shown(orphan.name, paths, member))
    first = {name: i for i, name in enumerate(dict.fromkeys(
        item.member.set_name if item.member else f"\0{item.name}" for item in shown))}
    order = {name: {cell: i for i, cell in enumerate(found)} for name, found in cells.items()}

    def key(item: Shown) -> tuple[int, int, str, int]:
        if item.member is None:
            return (first[f"\0{item.name}"], 0, "", 0)
        place = order.get(item.member.set_name, {})
        cell = item.member.cell
        return (first[item.member.set_name], place.get(cell, len(place)), cell or "",
                item.member.replica)
    return sorted(shown, key=key)


def find_named(names: Sequence[str], specs: Sequence[Path],
               state_dir: Path | None) -> list[Shown]:
    """Each name's lineage, or, for a set's name in ``specs``, the set (``grouped``: its
    members cell by cell, and its orphans). A name that is neither is an error naming the
    remedy (``reconciler.state.fleet.find_lineages``'s)."""
    loaded = expand(load_specs(specs, state_dir=state_dir), state_dir_or_none(state_dir)
                    ) if specs else []  # a selected set's members after its decisions
    sets = set(set_names(loaded))
    by_name = {spec.name: spec for spec in loaded}
    found: list[Shown] = []
    here: dict[str, Lineage] | None = None  # the state dir's lineages, read once
    for name in names:
        if name in sets:
            found += grouped(loaded, [s for s in loaded if s.set_name == name], state_dir)
        elif name in by_name:
            found += grouped(loaded, [by_name[name]], state_dir)
        elif specs:
            find_lineages([name], specs, state_dir)  # raises: not there, and the remedy
        else:
            if here is None:
                here = {item.name: item for item in fleet([], state_dir)}
            found += [Shown(item.name, item.paths) for item in (
                [here[name]] if name in here else _in_state_dir(name, state_dir))]
    return found


def _in_state_dir(name: str, state_dir: Path | None) -> list[Lineage]:
    """The state dir's lineage ``name``; when there is none and ``name`` looks like a
    set's (lineages named as its members are there), an error saying to name its spec."""
    try:
        return find_lineages([name], [], state_dir)
    except StateError as error:
        pattern = member_pattern(name)
        members = [item.name for item in fleet([], state_dir) if pattern.match(item.name)]
        if not members:
            raise
        raise StateError(
            f"ouro: {name!r} looks like a set ({len(members)} lineages are named as its "
            f"members, e.g. {members[0]!r}): name its spec with --specs FILE to see the "
            "set") from error
