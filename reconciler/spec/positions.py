"""Where a problem is in a spec file: YAML nodes to ``FILE:LINE:COL``, and one problem's line.

Pure: reads composed YAML nodes (``ruamel.yaml.nodes``), never a file. A field's
place is its value's node, or its key's (an unknown key), or the nearest mapping
(a missing field); merge keys (``<<``) are looked through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from reconciler.errors import Problem

__all__ = ["MERGE_TAG", "children", "dotted", "locate", "locate_node", "mark", "problem"]

MERGE_TAG = "tag:yaml.org,2002:merge"


def _one_line(text: str) -> str:
    """Escape what is not printable (a key may hold a newline): one problem, one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def problem(shown: str, line: int, column: int, field: str, message: str) -> Problem:
    """One problem at ``shown:line:column``, each part on one line."""
    return Problem(file=_one_line(shown), line=max(1, line), column=max(1, column),
                   field=_one_line(field), message=_one_line(message))


def mark(node: Node) -> tuple[int, int]:
    """(line, column) of ``node``, counted from 1."""
    return node.start_mark.line + 1, node.start_mark.column + 1


def children(node: Node) -> list[Node]:
    """A mapping's keys and values, a sequence's items (nothing for a scalar)."""
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def locate_node(node: Node, loc: Sequence[Any], *, key: bool) -> Node:
    """The node of ``loc`` under ``node``: its key or value, else the nearest mapping."""
    current = node
    for depth, part in enumerate(loc):
        last = depth == len(loc) - 1
        if isinstance(current, MappingNode):
            pair = _find_pair(current, str(part))
            if pair is None:
                return current
            current = pair[0] if (last and key) else pair[1]
        elif isinstance(current, SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(current.value):
                return current
            current = current.value[part]
        else:
            return current
    return current


def locate(node: Node, loc: Sequence[Any], *, key: bool) -> tuple[int, int]:
    """(line, column) of ``loc`` under ``node`` (``locate_node``)."""
    return mark(locate_node(node, loc, key=key))


def _find_pair(mapping: MappingNode, name: str) -> tuple[Node, Node] | None:
    merged: list[Node] = []
    for key, value in mapping.value:
        if isinstance(key, ScalarNode):
            if key.tag == MERGE_TAG:
                merged.extend(value.value if isinstance(value, SequenceNode) else [value])
            elif str(key.value) == name:
                return key, value
    for other in merged:
        if isinstance(other, MappingNode):
            found = _find_pair(other, name)
            if found is not None:
                return found
    return None


def dotted(loc: Sequence[Any]) -> str:
    """A field's path as a problem shows it (``spec.storage.path``)."""
    return ".".join(str(part) for part in loc)  # a spec has no lists: every part is a key
