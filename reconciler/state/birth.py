"""A lineage's birth: the root commit of its branch's first-parent line and its metadata.

Rule: read-only, pygit2 only, never raises for a damaged lineage: what cannot be read
is ``None`` (the commit) or ``{}`` (the metadata). The root commit names a lineage
beyond its name (a lineage deleted and born again under the same name is another one):
``ouro export --to mlflow`` finds a lineage's run again by name and root commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pygit2

from reconciler.kernel.base.config import METADATA_FILE, LineagePaths

__all__ = ["Birth", "birth"]

_BARE = pygit2.enums.RepositoryOpenFlag.NO_SEARCH | pygit2.enums.RepositoryOpenFlag.BARE
_ERRORS = (pygit2.GitError, KeyError, ValueError, OSError, TypeError, UnicodeDecodeError)


@dataclass(frozen=True)
class Birth:
    """The root commit (None: unreadable or no branch) and its metadata file's object."""

    commit: str | None
    metadata: dict[str, Any] = field(default_factory=dict)


def _metadata(repo: pygit2.Repository, commit: pygit2.Commit) -> dict[str, Any]:
    try:
        kind, data = repo.odb.read(commit.tree[METADATA_FILE].id)
        found = json.loads(data) if kind == pygit2.enums.ObjectType.BLOB else None
    except _ERRORS:
        return {}
    return found if isinstance(found, dict) else {}


def birth(paths: LineagePaths) -> Birth:
    """The lineage branch's root commit (first parents from its head) and its metadata."""
    try:
        repo = pygit2.Repository(str(paths.git_dir), _BARE)
        commit = repo.get(repo.lookup_reference(f"refs/heads/{paths.branch}").resolve().target)
        while isinstance(commit, pygit2.Commit) and commit.parent_ids:
            commit = repo.get(commit.parent_ids[0])
    except _ERRORS:
        return Birth(None)
    if not isinstance(commit, pygit2.Commit):
        return Birth(None)
    return Birth(str(commit.id), _metadata(repo, commit))
