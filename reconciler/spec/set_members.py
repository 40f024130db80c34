"""A LineageSet's members, each validated as the Lineage it is, with problems placed in
the set's file: at the matrix value that made a member, else in the template.

Pure but for validation's own reads (a replay folder, probe files). The rules of
names, cells and labels are ``reconciler.spec.sets``'; here the set's own fields
are checked (matrix keys, values once each, no storage of a member's own), its
size is bounded before anything is expanded (``max_members``: 10,000 members
unless ``--max-set-members`` raises it), and one member per cell is validated (its
replicas differ only in name and labels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ruamel.yaml.nodes import Node

from reconciler.errors import Problem
from reconciler.spec import sets
from reconciler.spec.messages import Place, plain_place, validated
from reconciler.spec.models import LineageSetSpec, LineageSpec
from reconciler.spec.names import MATRIX_KEY, whole
from reconciler.spec.positions import dotted, locate_node, mark, problem
from reconciler.spec.selection import selection_problems
from reconciler.spec.sources import Document, Source

__all__ = ["DEFAULT_MAX_MEMBERS", "allow_members", "max_members", "validate_set"]

# The most members one set may have: its size (the matrix's product times replicas)
# is computed from the numbers alone, before a cell is made, so a 16-line set of
# 6 keys x 10 values x 10,000 replicas is refused at once instead of filling memory.
DEFAULT_MAX_MEMBERS = 10_000
_limit = DEFAULT_MAX_MEMBERS

_OWN_PLACES = ("path", "git_dir", "observations", "branch", "observation_branch")


def _set_problems(spec: LineageSetSpec, node: Node) -> list[tuple[Node, str, str]]:
    """What a set may not say, beyond its model: (node, field, message)."""
    found: list[tuple[Node, str, str]] = []
    body = spec.spec
    too_long = sets.name_problem(spec.name, bool(body.matrix))
    if too_long:
        found.append((locate_node(node, ("metadata", "name"), key=False),
                      "metadata.name", too_long))
    for key, values in body.matrix.items():
        where = locate_node(node, ("spec", "matrix", key), key=True)
        field = f"spec.matrix.{key}"
        if not whole(MATRIX_KEY, key):
            found.append((where, field, "a matrix key is a spec field path of lowercase "
                          "names joined by '.' (e.g. model, ceilings.wall)"))
        elif key.split(".")[0] == "storage":
            found.append((where, field, "a member's storage is its own (<state dir>/<member>): "
                          "the matrix cannot set it"))
        if not values:
            found.append((where, field, "an empty list makes no cells: give at least one value"))
        digests: dict[str, int] = {}
        for i, value in enumerate(values):
            seen = digests.setdefault(sets.slug([value]) + repr(value), i)
            if seen != i:
                found.append((locate_node(node, ("spec", "matrix", key, i), key=False),
                              f"{field}[{i}]", f"repeats {field}[{seen}]: each value once"))
    storage = body.template.get("storage")
    for name in _OWN_PLACES:
        if isinstance(storage, dict) and name in storage:
            found.append((locate_node(node, ("spec", "template", "storage", name), key=True),
                          f"spec.template.storage.{name}",
                          "a member's storage is its own (<state dir>/<member>, branch "
                          "lineage-<member>): remove it from the template"))
    if body.selection is not None:
        size = math.prod(len(values) for values in body.matrix.values()) * body.replicas
        for loc, field, message in selection_problems(body.selection, body.template, size,
                                                       spec.name):
            found.append((locate_node(node, ("spec", "selection", *loc), key=False),
                          field, message))
    return found


def allow_members(limit: int) -> None:
    """Bound every set of this process at ``limit`` members (``--max-set-members``)."""
    global _limit
    if limit < 1:
        raise ValueError(f"a set's member limit is at least 1, not {limit}")
    _limit = limit


def max_members() -> int:
    """The most members one set may have in this process."""
    return _limit


def _size_problem(spec: LineageSetSpec, node: Node) -> tuple[Node, str, str] | None:
    """Why the set is too large to expand (None: it is not), from its numbers alone."""
    body = spec.spec
    cells = math.prod(len(values) for values in body.matrix.values())
    members = cells * body.replicas
    if members <= _limit:
        return None
    if cells > 1:
        sizes = " x ".join(str(len(values)) for values in body.matrix.values())
        size = (f"{cells:,} cells ({sizes} matrix values) x {body.replicas:,} "
                f"replica{'s' * (body.replicas != 1)}")
        where, field = locate_node(node, ("spec", "matrix"), key=True), "spec.matrix"
    else:
        size = f"{body.replicas:,} replicas"
        where, field = locate_node(node, ("spec", "replicas"), key=False), "spec.replicas"
    return where, field, (
        f"this set has {members:,} members ({size}); a set has at most {_limit:,}: lower "
        "replicas or the matrix, or raise the limit with --max-set-members N")


def _member_place(cell: sets.Cell, member: str) -> Place:
    """Where a member's problem is written: at the matrix value that made it, else in
    the template; the message names the member."""
    def place(node: Node, loc: Sequence[Any], key: bool) -> tuple[Node, str, str]:
        prefix = f"member {member}: "
        if not loc or loc[0] != "spec":
            return locate_node(node, ("metadata",), key=False), "metadata", prefix
        rest = list(loc[1:])
        for name, index in cell.where.items():
            parts = name.split(".")
            if [str(p) for p in rest[:len(parts)]] == parts:
                inner = rest[len(parts):]
                at = ("spec", "matrix", name, index, *inner)
                shown = f"spec.matrix.{name}[{index}]" + "".join(f".{p}" for p in inner)
                return locate_node(node, at, key=key), shown, prefix
        return (locate_node(node, ("spec", "template", *rest), key=key),
                dotted(("spec", "template", *rest)), prefix)
    return place


def validate_set(source: Source, index: int, node: Node, value: Any,
                 problems: list[Problem]) -> list[Document]:
    """A LineageSet's members, each validated as the Lineage it is (one per cell: its
    replicas differ only in name and labels)."""
    spec = validated(LineageSetSpec, source, node, value, problems, plain_place)
    if spec is None:
        return []
    own = _set_problems(spec, node)
    too_large = _size_problem(spec, node) if not own else None
    if too_large is not None:
        own.append(too_large)
    for where, field, message in own:
        problems.append(problem(source.shown, *mark(where), field, message))
    if own:
        return []
    members: list[Document] = []
    labels = spec.metadata.labels
    template_problems: set[tuple[int, int, str, str]] = set()  # said once, not per cell
    for cell in sets.cells(spec.name, spec.spec.matrix):
        first = sets.member_document(spec.api_version, labels, spec.name,
                                     spec.spec.template, cell, 0)
        found: list[Problem] = []
        member = validated(LineageSpec, source, node, first, found,
                           _member_place(cell, first["metadata"]["name"]))
        for one in found:
            said = one.message.split(": ", 1)[-1]
            if one.field.startswith("spec.template"):
                if (one.line, one.column, one.field, said) in template_problems:
                    continue
                template_problems.add((one.line, one.column, one.field, said))
            problems.append(one)
        if member is None:
            continue
        cell_labels = cell.labels()
        for i in range(spec.spec.replicas):
            metadata = member.metadata.model_copy(
                update=sets.member_metadata(labels, spec.name, cell.name, cell_labels, i))
            members.append(Document(source, index, node,
                                    member.model_copy(update={"metadata": metadata}),
                                    set_name=spec.name,
                                    member=sets.Membership(spec.name, cell.name, i,
                                                           dict(cell.values),
                                                           selection=spec.spec.selection)))
    return members
