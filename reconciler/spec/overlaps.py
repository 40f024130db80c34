"""Where the lineages of one run live, judged together: names unique, no place shared,
and every place one a lineage may live in (``reconciler.spec.places``' rules: no
kernel pseudo-filesystem, no system or reserved folder, none inside another lineage).

Linear in the places: each parent folder is resolved and judged once.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.errors import Problem
from reconciler.spec import places
from reconciler.spec.loaded import LoadedSpec
from reconciler.spec.positions import locate, problem
from reconciler.spec.sources import Document

__all__ = ["PSEUDO_FILESYSTEMS", "check_places", "check_unique"]


def check_unique(documents: list[Document], loaded: list[LoadedSpec],
                 problems: list[Problem]) -> None:
    """Names are unique in a run; no two lineages (or one lineage's places) share a place."""
    names: dict[str, tuple[Document, tuple[int, int]]] = {}
    taken: dict[Path, tuple[str, str]] = {}
    named_at: dict[int, tuple[int, int]] = {}  # by node: a set's members share their set's
    for document, spec in zip(documents, loaded, strict=True):
        where = named_at.get(id(document.node))
        if where is None:
            where = named_at[id(document.node)] = locate(document.node, ("metadata", "name"),
                                                         key=False)
        if spec.name in names:
            first, (line, column) = names[spec.name]
            problems.append(problem(
                document.source.shown, *where, "metadata.name",
                f"{document.member_of()}lineage {spec.name!r} is already defined at "
                f"{first.source.shown}:{line}:{column}; names must be unique",
            ))
            continue
        names[spec.name] = (document, where)
        paths = spec.paths()
        for field, place in (("path", paths.worktree), ("git_dir", paths.git_dir),
                             ("observations", paths.observations)):
            owner = f"{document.source.shown}:{where[0]}:{where[1]}"
            if place in taken:
                other_name, other_owner = taken[place]
                other = "its own storage" if other_name == spec.name else (
                    f"lineage {other_name!r} ({other_owner})")
                problems.append(problem(
                    document.source.shown,
                    *locate(document.node, ("spec", "storage", field), key=False),
                    f"spec.storage.{field}",
                    f"{document.member_of()}{place} is already used by {other}",
                ))
            else:
                taken[place] = (spec.name, owner)


# Kernel pseudo-filesystems: a lineage's places there would be the host's own state.
PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))
_FIELDS = ("path", "git_dir", "observations")
_PLACE_NAMES = {"path": "worktree", "git_dir": "git dir", "observations": "observations"}


def _pseudo_problem(place: Path, resolved: Path) -> str | None:
    pseudo = next((root for root in PSEUDO_FILESYSTEMS
                   if place.is_relative_to(root) or resolved.is_relative_to(root)), None)
    if pseudo is None:
        return None
    return (f"{place} is under {pseudo}, a kernel pseudo-filesystem: a lineage's places "
            "must be on a real filesystem; choose another path (or state dir)")


def _nested_in_run(place: Path, real: Path, own: str,
                   named: dict[str, tuple[Path, str, str]]) -> str | None:
    """Why ``place`` lies inside a place another spec of this run names (None: it does not).

    ``named`` maps each place of the run, as written and resolved, to (the place, its
    lineage, its field); the folders ``place`` lies in are looked up there: linear in
    the places, never pairwise (a fleet of thousands loads in a moment).
    """
    for folder in places.ancestors(str(place), str(real)):
        found = named.get(folder)
        if found is None or found[1] == own:
            continue  # a git dir inside its own worktree is git's ordinary layout
        other, name, other_field = found
        return (f"{place} is inside {other}, lineage {name!r}'s "
                f"{_PLACE_NAMES[other_field]}: a lineage inside another would be "
                "committed into it (an external edit) or read as its history; choose a "
                "path outside it")
    return None


def check_places(documents: list[Document], loaded: list[LoadedSpec],
                 problems: list[Problem], state: Path | None) -> None:
    """Each place of each lineage is one it may live in (``reconciler.spec.places``).

    Linear in the places: each parent folder is resolved and judged once
    (``places.Folders``), and only a place it cannot clear is checked in full."""
    named: dict[str, tuple[Path, str, str]] = {}  # filled below, before it is asked
    seen: dict[str, str | None] = {}
    reserved = places.reserved_folders(state)
    folders = places.Folders((*PSEUDO_FILESYSTEMS, *places.SYSTEM_FOLDERS,
                              *(folder for folder, _ in reserved),
                              *places.python_path_folders()), named, seen)
    resolved = [[(place, folders.realpath(str(place))) for place in _places(spec)]
                for spec in loaded]
    for spec, pairs in zip(loaded, resolved, strict=True):
        for field, (place, real) in zip(_FIELDS, pairs, strict=True):
            for key in (str(place), real):
                named.setdefault(key, (place, spec.name, field))
    for document, spec, pairs in zip(documents, loaded, resolved, strict=True):
        if all(folders.clear(str(place)) and (real == str(place) or folders.clear(real))
               for place, real in pairs):
            continue
        own = {str(path) for pair in pairs for path in pair}
        for field, (place, text) in zip(_FIELDS, pairs, strict=True):
            reached = Path(text)
            why = (_pseudo_problem(place, reached)
                   or places.system_problem(place, reached)
                   or places.reserved_problem(place, reserved, reached)
                   or _nested_in_run(place, reached, spec.name, named)
                   or places.inside_a_lineage(place, reached, own, seen))
            if why is not None:
                problems.append(problem(
                    document.source.shown,
                    *locate(document.node, ("spec", "storage", field), key=False),
                    f"spec.storage.{field}", document.member_of() + why))


def _places(spec: LoadedSpec) -> tuple[Path, Path, Path]:
    """A lineage's three places: worktree, git dir, observations."""
    paths = spec.paths()
    return paths.worktree, paths.git_dir, paths.observations

