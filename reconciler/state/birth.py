"""A lineage's birth: the root commit of its branch's first-parent line and its metadata.

Rule: read-only, pygit2 only, never raises for a damaged lineage: what cannot be read
is ``None`` (the commit) or ``{}`` (the metadata). The root commit names a lineage
beyond its name (a lineage deleted and born again under the same name is another one):
``ouro export --to mlflow`` finds a lineage's run again by name and root commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconciler.errors import StateError
from reconciler.kernel.base.config import LineagePaths
from reconciler.state.repos import Lineage

__all__ = ["Birth", "birth"]


@dataclass(frozen=True)
class Birth:
    """The root commit (None: unreadable or no branch) and its metadata file's object."""

    commit: str | None
    metadata: dict[str, Any] = field(default_factory=dict)


def birth(paths: LineagePaths) -> Birth:
    """The lineage branch's root commit (first parents from its head) and its metadata."""
    try:
        commit, metadata = Lineage(paths).root_metadata()
    except StateError:
        return Birth(None)
    return Birth(commit, metadata)
