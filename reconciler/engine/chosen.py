"""Which lineages a reading command looks at: the one home for "these arguments, these
specs, these selectors: which lineages". Read-only.

Rule: every reading command (status, log, export, verify; show and diff take one name)
resolves its arguments here, so that a name, a set's name, a spec path and a selector mean
the same everywhere:

- an argument that is a file or folder on disk is a spec path (``./NAME`` forces it); any
  other argument is a lineage's or a set's name. A name that is also a folder here holding
  no spec while the state dir has a lineage of that name (the state dir as the working
  folder) is the lineage's name;
- names are found through the specs (the paths and ``--specs``), else in the state dir
  (``reconciler.engine.sets.find_named``); no names: every lineage of the specs, set by
  set with its orphans (``grouped``), or, without specs, every lineage of the state dir;
- ``--select`` chooses among them by name or label. A lineage found with its spec has its
  spec's labels; one found without (an orphan, a state-dir lineage) has only the set
  labels its name says (``ouro/set``, ``ouro/replica``, ``ouro/cell``) for the sets the
  selectors name: labels live in specs, so the error of a selector that selects nothing
  says to name them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.engine.epochs import expand
from reconciler.engine.sets import Shown, find_named, grouped
from reconciler.errors import OuroError
from reconciler.spec.fork_parents import state_dir_or_none
from reconciler.spec.load import LoadedSpec, default_places, load_specs
from reconciler.spec.select import Selector, SelectorError, parse, select
from reconciler.spec.sets import (
    CELL_LABEL,
    REPLICA_LABEL,
    SET_LABEL,
    member_pattern,
    orphan_membership,
)
from reconciler.state.fleet import fleet
from reconciler.statedir import state_dir as resolve_state_dir

__all__ = ["Arguments", "choose", "split_arguments"]

_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Arguments:
    """A command's positional arguments, told apart."""

    paths: tuple[Path, ...]
    names: tuple[str, ...]


def _a_lineage_here(name: str, state_dir: Path | None) -> bool:
    try:
        folder = resolve_state_dir(state_dir)
    except (OSError, RuntimeError, KeyError, ValueError):
        return False
    return default_places(folder / name, name).git_dir.is_dir()


def _has_specs(folder: Path) -> bool:
    return any(folder.rglob("*.yaml")) or any(folder.rglob("*.yml"))


def split_arguments(arguments: Sequence[str | Path], state_dir: Path | None) -> Arguments:
    """Spec paths apart from names (the module rule)."""
    paths: list[Path] = []
    names: list[str] = []
    for argument in arguments:
        text = str(argument)
        path = Path(text)
        named = _NAME.fullmatch(text) is not None
        if path.exists() and not (named and path.is_dir() and _a_lineage_here(text, state_dir)
                                  and not _has_specs(path)):
            paths.append(path)
        elif named:
            names.append(text)
        else:
            paths.append(path)  # the loader says what is wrong with it (no such file …)
    return Arguments(tuple(paths), tuple(names))


@dataclass(frozen=True)
class _Candidate:
    """A lineage to choose from, with the labels a selector sees."""

    name: str
    labels: Mapping[str, str]
    shown: Shown


def _named_sets(selectors: Sequence[Selector]) -> list[str]:
    return [value for selector in selectors for requirement in selector.requirements
            if requirement.key == SET_LABEL for value in sorted(requirement.values)]


def _labels(shown: Shown, sets: Sequence[str]) -> dict[str, str]:
    """Its spec's labels; else the set labels its membership or name says."""
    if shown.spec is not None:
        return dict(shown.spec.labels)
    member = shown.member
    if member is None:
        found = next((name for name in sets if member_pattern(name).match(shown.name)), None)
        if found is None:
            return {}
        member = orphan_membership(found, shown.name, {})
    labels = {SET_LABEL: member.set_name, REPLICA_LABEL: str(member.replica)}
    return {**labels, CELL_LABEL: member.cell} if member.cell else labels


def _select(found: Sequence[Shown], select_texts: Sequence[str], command: str,
            with_specs: bool) -> list[Shown]:
    if not select_texts:
        return list(found)
    try:
        selectors = [parse(text) for text in select_texts]
        sets = _named_sets(selectors)
        candidates = [_Candidate(item.name, _labels(item, sets), item) for item in found]
        return [item.shown for item in select(candidates, selectors)]
    except SelectorError as error:
        message = str(error)
        if not with_specs:
            message = message.replace("lineage of the specs", "lineage of the state dir") + (
                "; without their specs, lineages have only the set labels their names say "
                "(ouro/set, ouro/replica, ouro/cell): name the specs for the others")
        raise OuroError(f"{command}: {message}") from None


def choose(arguments: Sequence[str | Path], *, names: Sequence[str] = (),
           specs: Sequence[Path] = (), select_texts: Sequence[str] | None = (),
           state_dir: Path | None = None, command: str = "ouro") -> list[Shown]:
    """The lineages ``arguments`` (spec paths and names, told apart), ``names`` (names
    only: log's and export's arguments), ``specs`` (``--specs``) and ``select_texts``
    (``--select``) name, as the module rule says; each set's members together, cell by
    cell."""
    told = split_arguments(arguments, state_dir)
    spec_paths = [*told.paths, *specs]
    if told.names or names:
        found = find_named([*told.names, *names], spec_paths, state_dir)
        return _select(found, select_texts or (), command, bool(spec_paths))
    if spec_paths:
        loaded = expand(load_specs(spec_paths, state_dir=state_dir),
                        state_dir_or_none(state_dir))  # a selected set's later epochs too
        chosen: list[LoadedSpec] = _select_specs(loaded, select_texts or (), command)
        return grouped(loaded, chosen, state_dir)
    found = [Shown(item.name, item.paths) for item in fleet([], state_dir)]
    return _select(found, select_texts or (), command, False)


def _select_specs(loaded: Sequence[LoadedSpec], select_texts: Sequence[str],
                  command: str) -> list[LoadedSpec]:
    """The specs the selectors choose (before grouping: a chosen set's orphans are shown
    with it, whatever their labels)."""
    try:
        return select(list(loaded), [parse(text) for text in select_texts])
    except SelectorError as error:
        raise OuroError(f"{command}: {error}") from None
