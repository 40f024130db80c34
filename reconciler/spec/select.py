"""``--select``: lineages by name or by label selector, in kubectl's syntax. Pure.

A value that is a lineage name (a DNS label) selects that lineage. Anything else
is a label selector: requirements joined by commas, all of which must hold:

    key=value  key==value  key!=value  key in (v1,v2)  key notin (v1,v2)  key  !key

(``key`` alone: the label exists; ``!key``: it does not; ``!=`` and ``notin`` also
match a lineage without the label, as in kubectl). A lineage is selected when it
matches any of the values given. A value that selects nothing is an error: a typo
must not silently apply nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from reconciler.spec.names import DNS_LABEL, whole

__all__ = ["Requirement", "Selector", "SelectorError", "parse", "select"]

_KEY = r"[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?"
_VALUE = r"[A-Za-z0-9._/-]*"
_EQUALITY = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


class SelectorError(ValueError):
    """A --select value is a lineage name or a label selector in kubectl's syntax."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "in", "notin", "exists", "!exists" ("=" is "in" of one value)
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        if self.operator == "in":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values


@dataclass(frozen=True)
class Selector:
    text: str
    name: str | None = None  # a lineage name, or
    requirements: tuple[Requirement, ...] = ()  # a label selector

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if self.name is not None:
            return name == self.name
        return all(requirement.matches(labels) for requirement in self.requirements)


def _split(text: str) -> list[str]:
    """Commas separate requirements, except inside the parentheses of a set."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _requirement(part: str, text: str) -> Requirement:
    if match := _SET.match(part):
        values = frozenset(v.strip() for v in match[3].split(","))
        if not all(re.fullmatch(_VALUE, v) for v in values):
            raise SelectorError(f"--select {text!r}: bad values in {part.strip()!r}")
        return Requirement(match[1], match[2], values)
    if match := _EQUALITY.match(part):
        return Requirement(match[1], "notin" if match[2] == "!=" else "in",
                           frozenset({match[3]}))
    if match := _EXISTS.match(part):
        return Requirement(match[2], "!exists" if match[1] else "exists")
    raise SelectorError(
        f"--select {text!r}: {part.strip()!r} is not a label requirement (write "
        "key=value, key!=value, 'key in (a,b)', 'key notin (a,b)', key or !key)")


def parse(text: str) -> Selector:
    """A lineage name, or a label selector; ``SelectorError`` with the syntax otherwise."""
    if whole(DNS_LABEL, text):
        return Selector(text, name=text)
    if not text.strip():
        raise SelectorError("--select '': give a lineage name or a label selector")
    return Selector(text, requirements=tuple(_requirement(p, text) for p in _split(text)))


class Selectable(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


T = TypeVar("T", bound=Selectable)


def select(items: Sequence[T], selectors: Sequence[Selector]) -> list[T]:
    """The items (in their order) that match any selector; all of them when none is given."""
    if not selectors:
        return list(items)
    empty = [s.text for s in selectors
             if not any(s.matches(item.name, item.labels) for item in items)]
    if empty:
        known = ", ".join(item.name for item in items) or "none"
        labels = sorted({f"{k}={v}" for item in items for k, v in item.labels.items()})
        raise SelectorError(
            f"--select {', '.join(empty)}: selects no lineage of the specs (lineages: {known}"
            + (f"; labels: {', '.join(labels)}" if labels else "") + ")")
    return [item for item in items if any(s.matches(item.name, item.labels) for s in selectors)]
