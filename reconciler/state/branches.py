"""Which branches an existing lineage lives on: the ones it records. Read-only.

Rule: a spec that leaves ``storage.branch`` / ``observation_branch`` unset means
"the lineage's own branches". For a lineage that exists, those are what its
records name, in this order: the observation repository's ``metadata.json``
(``lineage_branch``, ``observation_branch``, on the branch its HEAD names);
the lineage's root metadata, when it names them; else the branch each
repository's HEAD names. The loader's defaults (``lineage-<name>``,
``observations/<branch>``) apply only to a birth, or when nothing is recorded.
A branch the spec names is used as named; ``observe`` then refuses a
mismatch with the recorded one, naming both. A lineage records its name in its
default branch (``lineage-<name>``): a spec of another name does not adopt it.

Like ``observe``, nothing here writes and nothing raises for a damaged
lineage: what cannot be read is simply not a record.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pygit2

from reconciler.errors import StateError
from reconciler.kernel.base.config import METADATA_FILE, LineagePaths
from reconciler.kernel.base.formats import OBSERVATION_METADATA_FILE
from reconciler.state.repos import Lineage, Repo

__all__ = ["DEFAULT_BRANCH_PREFIX", "DeclaredSpec", "Recorded", "names_another",
           "recorded_branches", "resolve", "spec_paths"]

DEFAULT_BRANCH_PREFIX = "lineage-"  # a birth's branch is lineage-<metadata.name>


@dataclass(frozen=True)
class Recorded:
    """The branches a lineage's records name (None: nothing names one), and where."""

    lineage: str | None
    observation: str | None
    lineage_source: str = ""
    observation_source: str = ""


class DeclaredSpec(Protocol):
    """What resolution needs of a spec (``reconciler.spec.load.LoadedSpec``)."""

    @property
    def declared_branch(self) -> str | None: ...
    @property
    def declared_observation_branch(self) -> str | None: ...
    def paths(self) -> LineagePaths: ...


def _json_object(repo: Repo, commit: pygit2.Commit | None, path: str) -> dict[str, Any]:
    value = repo.json_or_none(commit.tree, path) if commit is not None else None
    return value if isinstance(value, dict) else {}


def _name(record: dict[str, Any], key: str) -> str | None:
    value = record.get(key)
    return value if isinstance(value, str) and value.strip() else None


def _head_commit(repo: Repo) -> pygit2.Commit | None:
    try:
        return repo.head_commit()
    except StateError:  # a damaged newest commit records nothing readable
        return None


def _root_metadata(repo: Repo) -> dict[str, Any]:
    """The root commit's metadata on HEAD's first-parent line. O(history): only called
    when the observation repository names no branch (it is absent or unreadable)."""
    head = _head_commit(repo)
    try:
        return _json_object(repo, repo.root(head), METADATA_FILE) if head is not None else {}
    except StateError:
        return {}


def recorded_branches(paths: LineagePaths, opened: Lineage | None = None) -> Recorded:
    """The branches the lineage at ``paths`` records (its places as they are now);
    ``opened``: its repositories, when the caller has opened them already."""
    lineage: str | None = None
    observation: str | None = None
    lineage_source = observation_source = ""
    opened = opened if opened is not None else Lineage(paths)
    obs = opened.observations
    if obs is not None:
        record = _json_object(obs, _head_commit(obs), OBSERVATION_METADATA_FILE)
        where = f"{paths.observations}/{OBSERVATION_METADATA_FILE}"
        lineage, observation = _name(record, "lineage_branch"), _name(record, "observation_branch")
        lineage_source = where if lineage else ""
        observation_source = where if observation else ""
    if lineage is not None and observation is not None:
        return Recorded(lineage, observation, lineage_source, observation_source)
    repo = opened.lineage
    if repo is not None:
        root = _root_metadata(repo)
        where = f"{paths.git_dir}: {METADATA_FILE} of the root commit"
        if lineage is None and _name(root, "lineage_branch"):
            lineage, lineage_source = _name(root, "lineage_branch"), where
        if observation is None and _name(root, "observation_branch"):
            observation, observation_source = _name(root, "observation_branch"), where
    if lineage is None and repo is not None:
        lineage = repo.head_branch()
        lineage_source = f"the HEAD of {paths.git_dir}" if lineage else ""
    if observation is None and obs is not None:
        observation = obs.head_branch()
        observation_source = f"the HEAD of {paths.observations}" if observation else ""
    return Recorded(lineage, observation, lineage_source, observation_source)


def names_another(branch: str | None, name: str) -> str | None:
    """The lineage name a default branch (``lineage-NAME``) records, when it is not ``name``."""
    if not name or branch is None or not branch.startswith(DEFAULT_BRANCH_PREFIX):
        return None
    recorded = branch.removeprefix(DEFAULT_BRANCH_PREFIX)
    return recorded if recorded != name else None


def resolve(
    paths: LineagePaths, *, declared_branch: str | None, declared_observation_branch: str | None,
    by_name: bool = False, recorded_of: Callable[[LineagePaths], Recorded] = recorded_branches,
) -> LineagePaths:
    """``paths`` (the loader's defaults) with the branches the spec means.

    Declared branches win; an unset one is the recorded one when the lineage exists,
    else the default (a birth). ``by_name`` (a spec's lineage): a recorded default
    branch of ANOTHER name (``lineage-a`` for a spec named ``b``) is not adopted: the
    spec keeps its own, and ``observe`` refuses the mismatch naming both (two specs
    naming one place across runs are told apart as within one). ``recorded_of``: how the
    recorded branches are read (``recorded_branches``, or a reader that answers exactly
    as it does, from what it has read already).
    """
    if declared_branch and declared_observation_branch:
        return replace(paths, branch=declared_branch,
                       observation_branch=declared_observation_branch)
    if not any(os.path.lexists(p) for p in (paths.worktree, paths.git_dir, paths.observations)):
        return paths
    recorded = recorded_of(paths)
    branch = declared_branch or recorded.lineage or paths.branch
    if by_name and declared_branch is None and names_another(recorded.lineage, paths.name):
        branch = paths.branch
    observation = (
        declared_observation_branch or recorded.observation or f"observations/{branch}"
    )
    return replace(paths, branch=branch, observation_branch=observation)


def spec_paths(spec: DeclaredSpec,
               recorded_of: Callable[[LineagePaths], Recorded] = recorded_branches
               ) -> LineagePaths:
    """The places and branches of a spec's lineage as they are now (see the module rule;
    ``recorded_of`` as ``resolve``'s)."""
    return resolve(
        spec.paths(),
        declared_branch=spec.declared_branch,
        declared_observation_branch=spec.declared_observation_branch,
        by_name=True, recorded_of=recorded_of,
    )
