"""LineageSet expansion: a set's cells and members, their names and labels. Pure.

Rule: a member's name depends on the set's name, its own matrix values and its
replica index, never on the other cells or the order they are written in, so that
adding a matrix value or raising ``replicas`` never renames an existing member.

    <set>-<cell>-<i>   with a matrix: the cell is a readable slug of the values
                        (cut to fit) and 6 hex of the SHA-256 of their canonical JSON
    <set>-<i>          without one (one cell)

``i`` counts from 0. A member is an ordinary lineage labelled ``ouro/set``,
``ouro/replica``, ``ouro/cell`` (with a matrix) and ``ouro/<key>`` per matrix key
(its value's slug), on top of the set's own labels.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.spec.selection import SelectionSpec

__all__ = [
    "INDEX_DIGITS",
    "Cell",
    "Membership",
    "NotSelected",
    "cell_name",
    "cells",
    "member_document",
    "member_metadata",
    "member_name",
    "member_pattern",
    "name_problem",
    "orphan_membership",
    "set_of",
    "slug",
]

NAME_LIMIT = 63  # a lineage name is a DNS label
INDEX_DIGITS = 4  # room kept for the index: replicas <= 10,000 (MAX_REPLICAS)
DIGEST_HEX = 6
SET_LABEL = "ouro/set"
REPLICA_LABEL = "ouro/replica"
CELL_LABEL = "ouro/cell"
_SLUG_JUNK = re.compile(r"[^a-z0-9]+")


def slug(value: Any) -> str:
    """A readable, name-safe form of a value: its scalars, lowercased, joined by '-'."""
    if isinstance(value, Mapping):
        parts = [slug(value[key]) for key in sorted(value, key=str)]
    elif isinstance(value, list | tuple):
        parts = [slug(item) for item in value]
    else:
        parts = [_SLUG_JUNK.sub("-", str(value).lower())]
    return "-".join(p.strip("-") for p in parts if p.strip("-"))


def _canonical(values: Mapping[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)


def _room(set_name: str) -> int:
    """Characters left for a cell name in ``<set>-<cell>-<i>``."""
    return NAME_LIMIT - len(set_name) - 2 - INDEX_DIGITS


def name_problem(set_name: str, has_matrix: bool) -> str | None:
    """Why the set's name leaves no room for its members' names (None: it does not)."""
    need = DIGEST_HEX if has_matrix else -1
    if _room(set_name) < need:
        most = NAME_LIMIT - 2 - INDEX_DIGITS - max(need, -1)
        return (f"{set_name!r} is too long for a set: its members are named "
                f"{'<set>-<cell>-<i>' if has_matrix else '<set>-<i>'} within 63 "
                f"characters; use at most {most} characters")
    return None


def cell_name(set_name: str, values: Mapping[str, Any]) -> str:
    """The cell of these matrix values: ``<slug>-<digest>``, or the digest alone."""
    digest = hashlib.sha256(_canonical(values).encode("utf-8")).hexdigest()[:DIGEST_HEX]
    room = _room(set_name) - DIGEST_HEX - 1
    readable = slug([values[key] for key in sorted(values)])[:max(room, 0)].strip("-")
    return f"{readable}-{digest}" if readable else digest


def member_name(set_name: str, cell: str | None, index: int) -> str:
    return f"{set_name}-{cell}-{index}" if cell else f"{set_name}-{index}"


@dataclass(frozen=True)
class Cell:
    """One combination of matrix values; ``where`` maps each key to its value's index."""

    name: str | None  # None: the set has no matrix
    values: dict[str, Any]
    where: dict[str, int]

    def labels(self) -> dict[str, str]:
        found = {f"ouro/{key}": slug(value)[:NAME_LIMIT].strip("-") or "none"
                 for key, value in self.values.items()}
        return {CELL_LABEL: self.name, **found} if self.name else {}


def cells(set_name: str, matrix: Mapping[str, list[Any]]) -> Iterator[Cell]:
    """Every combination of the matrix (one empty cell without a matrix)."""
    keys = list(matrix)
    for chosen in itertools.product(*(range(len(matrix[key])) for key in keys)):
        values = {key: matrix[key][i] for key, i in zip(keys, chosen, strict=True)}
        name = cell_name(set_name, values) if keys else None
        yield Cell(name, values, dict(zip(keys, chosen, strict=True)))


def _replace(body: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    target = body
    for part in parts[:-1]:
        child = target.get(part)
        if not isinstance(child, dict):
            child = target[part] = {}
        target = child
    target[parts[-1]] = copy.deepcopy(value)


def member_document(api_version: str, metadata_labels: Mapping[str, str], set_name: str,
                    template: Mapping[str, Any], cell: Cell, index: int) -> dict[str, Any]:
    """The plain Lineage document of one member (the template with the cell's values)."""
    body = copy.deepcopy(dict(template))
    for key, value in cell.values.items():
        _replace(body, key, value)
    return {"apiVersion": api_version, "kind": "Lineage",
            "metadata": member_metadata(metadata_labels, set_name, cell.name, cell.labels(),
                                        index),
            "spec": body}


def member_metadata(metadata_labels: Mapping[str, str], set_name: str, cell: str | None,
                    cell_labels: Mapping[str, str], index: int) -> dict[str, Any]:
    """One member's name and labels (``cell_labels``: its cell's ``Cell.labels()``)."""
    return {"name": member_name(set_name, cell, index),
            "labels": {**metadata_labels, SET_LABEL: set_name, REPLICA_LABEL: str(index),
                       **cell_labels}}


@dataclass(frozen=True)
class Membership:
    """Where a lineage sits in its set: the cell (None: no matrix), the replica index and
    the cell's matrix values as written (``{}`` when unknown: an orphan of a removed
    value). ``orphaned``: the set no longer has it (kept: history is never removed)."""

    set_name: str
    cell: str | None
    replica: int
    matrix: dict[str, Any]
    orphaned: bool = False
    selection: SelectionSpec | None = None  # the set's spec.selection (None: no selection)
    # A selected set's member (reconciler.engine.epochs, from the decisions' records): the
    # epoch it was born into (1: the set's own members) and the decision that stopped it
    # (None: living).
    born_epoch: int = 1
    not_selected: NotSelected | None = None

    def epoch(self, generation: int) -> int | None:
        """The epoch generation ``generation`` of this member ran in (None: not in a
        selected set): its seed (0) is in the epoch it was born into; generations 1 to
        ``every`` in that epoch, each further ``every`` in the next (an epoch is ``every``
        generations of every living member)."""
        if self.selection is None:
            return None
        return self.born_epoch + max(0, generation - 1) // self.selection.every


NOT_SELECTED = "not-selected"  # the stop reason of a member a selection decision stopped


@dataclass(frozen=True)
class NotSelected:
    """The decision at the end of ``epoch`` that stopped a member of a selected set (stop
    reason ``not-selected``): the member's ``value`` of the rule's ``by`` at its
    ``generation``, the last it has; nothing of it is deleted."""

    epoch: int
    generation: int
    by: str
    value: float | None
    kept: int  # how many members that decision kept

    @property
    def message(self) -> str:
        shown = "unknown" if self.value is None else f"{self.value:g}"
        return (f"not selected at the end of epoch {self.epoch} ({self.by} {shown} at gen "
                f"{self.generation}; {self.kept} kept); stopped at gen {self.generation}, "
                "nothing deleted")


def orphan_membership(set_name: str, name: str,
                      known: Mapping[str | None, Mapping[str, Any]]) -> Membership:
    """The membership an orphan's name says (``<set>-[<cell>-]<i>``); its matrix values
    when its cell is still one the set has (``known``: cell name -> values), else ``{}``."""
    cell, _, index = name.removeprefix(f"{set_name}-").rpartition("-")
    found = known.get(cell or None)
    return Membership(set_name, cell or None, int(index) if index.isdigit() else 0,
                      dict(found) if found is not None else {}, orphaned=True)


def member_pattern(set_name: str) -> re.Pattern[str]:
    """Names a member of this set has or had: ``<set>-<i>``, ``<set>-[<slug>-]<hex6>-<i>``."""
    return re.compile(rf"^{re.escape(set_name)}-(?:(?:[a-z0-9-]*-)?[0-9a-f]{{{DIGEST_HEX}}}-)?"
                      rf"(?:0|[1-9][0-9]{{0,{INDEX_DIGITS - 1}}})\Z")


def set_of(labels: Mapping[str, str]) -> str | None:
    """The set a lineage's labels say it belongs to (None: none)."""
    return labels.get(SET_LABEL)
