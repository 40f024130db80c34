"""The family-tree page's tree: forks under their parents, by the ancestry each records.

Rule: read-only, from each lineage's root metadata (``state.birth``) and nothing else. A
fork hangs under the shown lineage of its recorded parent's name whose root commit is the
recorded one; a parent not shown (or another lineage under that name) is a node of its
own, named and marked absent, so that no fork is lost from the tree. Every name and
number a link is built from is one the server read; templates escape all of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from reconciler.kernel.base.config import LineagePaths
from reconciler.state.birth import birth
from reconciler.state.forks import ancestry_record

__all__ = ["ForkOf", "Node", "family_tree", "fork_of"]


@dataclass
class Node:
    """One lineage of the tree; ``generation``/``commit``: where it forked from its parent."""

    name: str
    present: bool = True  # False: a parent the viewer does not show
    generation: int | None = None
    commit: str | None = None
    kernel: str | None = None  # the fork's kernel: running | parent
    same_physics: bool | None = None
    children: list[Node] = field(default_factory=list)

    @property
    def href(self) -> str:
        return f"/lineage/{quote(self.name, safe='')}"

    def fork_href(self, parent: Node) -> str | None:
        """The parent's generation this fork started from (a page of the parent)."""
        if self.generation is None or not parent.present:
            return None
        return f"{parent.href}/gen/{int(self.generation)}"

    @property
    def size(self) -> int:
        return 1 + sum(child.size for child in self.children)


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ForkOf:
    """Where a fork started: its parent's name and the parent's generation (its seed)."""

    parent: str
    generation: int

    @property
    def href(self) -> str:
        """The parent's generation page."""
        return f"/lineage/{quote(self.parent, safe='')}/gen/{int(self.generation)}"


def fork_of(paths: LineagePaths) -> ForkOf | None:
    """The ancestry a lineage's root metadata records (None: not a fork, or unreadable)."""
    record = ancestry_record(birth(paths).metadata)
    if record is None:
        return None
    generation = _as_int(record.get("generation"))
    parent = record.get("parent")
    if generation is None or generation < 0 or not isinstance(parent, str) or not parent:
        return None
    return ForkOf(parent, generation)


def family_tree(lineages: Mapping[str, LineagePaths]) -> list[Node]:
    """The roots of the fleet's family tree (lineages in ``lineages``' order; a fork's
    children in that order too). Lineages that are no fork and have no fork are roots."""
    nodes = {name: Node(name) for name in lineages}
    roots: dict[str, str | None] = {}  # name -> its root commit
    records: dict[str, dict[str, Any]] = {}
    for name, paths in lineages.items():
        born = birth(paths)
        roots[name] = born.commit
        record = ancestry_record(born.metadata)
        if record is not None:
            records[name] = record
    absent: dict[tuple[str, str], Node] = {}
    top: list[Node] = []
    for name, node in nodes.items():
        record = records.get(name)
        if record is None:
            top.append(node)
            continue
        node.generation, node.commit = _as_int(record.get("generation")), (
            str(record.get("commit")) if record.get("commit") else None)
        node.kernel = str(record.get("kernel")) if record.get("kernel") else None
        node.same_physics = record.get("same_physics") if isinstance(
            record.get("same_physics"), bool) else None
        parent_name, parent_root = str(record.get("parent")), str(record.get("parent_root"))
        parent = nodes.get(parent_name)
        if parent is None or roots.get(parent_name) != parent_root or parent is node:
            key = (parent_name, parent_root)
            if key not in absent:
                absent[key] = Node(parent_name, present=False)
                top.append(absent[key])
            parent = absent[key]
        parent.children.append(node)
    return top
