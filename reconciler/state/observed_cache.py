"""What observe found of an in-sync lineage, cached by its heads: observe without reading.

Rule: a cache, never the state. A record is kept only for a lineage observe found
whole and in order (its three places present, no problem, nothing interrupted, the
fast check sufficient), and is believed only while every ref it was read from names
what it named then: the lineage branch, the observation branch, the probe branch and
both repositories' HEAD, and each repository's owner and config file (``Heads``), for
the same places and branches (the key of ``state.summaries``). Those refs are read from
their files where that is exactly what libgit2 reads (``repos.refs_from_files``), so a
lineage whose record holds is observed without opening its repositories. What is not in
the repositories' objects is never cached and is read every time by observe: the intent
marker, leftover ref locks, the apply lock's holder and the worktree (checked against the
head's tree id and listing the record keeps, ``worktree.clean_as_listed``, and through
libgit2 when that cannot prove it clean). Records are sealed with the state dir's MAC
(``state.cachefile``): one anyone else wrote, one that does not check, or one of an
older schema is ignored (observe reads the lineage and writes it again).

A record is three lines: a small sealed header (schema, key, heads, the digest of the
rest), checked before the rest is parsed at all; the body; and the newest observation's
``constraints`` (the manifest of the physics and ceilings: most of a record's bytes,
alike across a fleet's lineages of one ceilings and model) as their JSON text, parsed
once per distinct text in a process (``_constraints``): every lineage recalled with them
shares one read-only dict.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, fields
from decimal import InvalidOperation
from pathlib import Path
from typing import Any

from reconciler.kernel.base.config import LineagePaths
from reconciler.kernel.base.formats import OBSERVATION_METADATA_FILE
from reconciler.ownfiles import read_regular
from reconciler.state.branches import Recorded
from reconciler.state.cachefile import CacheSeal, cache_key, cache_seal, write_cache
from reconciler.state.observed import GenerationCommit, Observed
from reconciler.state.probes import probe_branch
from reconciler.state.repos import READ_ERRORS, Lineage
from reconciler.state.worktree import tree_listing

__all__ = ["Heads", "Recalled", "heads", "recall", "recorded", "remember"]

SCHEMA = "ouro-observed/v3"  # v2: the config stamps, the head tree and its listing;
#                               v3: the newest observation's constraints on a line of their own
_MAX_BYTES = 4 << 20  # a record past this is not read (probe metrics can grow)
_HEADER_BYTES = 64 << 10  # its header line is shorter than this


@dataclass(frozen=True)
class Heads:
    """What a record was read from: each ref's commit (or HEAD's branch), None if absent;
    and each repository's owner and config file (``Lineage.config_stamp``)."""

    lineage: str | None
    observation: str | None
    probes: str | None
    lineage_head_branch: str | None
    observation_head_branch: str | None
    lineage_config: str | None = None
    observation_config: str | None = None


def _fields(found: Heads) -> dict[str, str | None]:
    """``dataclasses.asdict`` of ``found`` (its fields are strings: no deep copy needed)."""
    return {name: getattr(found, name) for name in _HEADS_FIELDS}


def heads(paths: LineagePaths, lineage: Lineage) -> Heads:
    """The refs of ``paths``' branches now, read from the refs alone (no object; from
    the ref files when they tell beyond doubt: ``repos.refs_from_files``)."""
    head_branch, (branch,) = lineage.refs("lineage", (paths.branch,))
    obs_head_branch, (observation, probes) = lineage.refs(
        "observations", (paths.observation_branch, probe_branch(paths.branch)))
    return Heads(branch, observation, probes, head_branch, obs_head_branch,
                 lineage.config_stamp("lineage"), lineage.config_stamp("observations"))


_HEADS_FIELDS = tuple(item.name for item in fields(Heads))


@dataclass(frozen=True)
class Recalled:
    """A record believed: the observation (its live parts still to be read), and the
    lineage head's tree id and listing (``worktree.listing_of``) when it holds them."""

    observed: Observed
    tree: str | None
    listing: str | None


def _file(cache_dir: Path, paths: LineagePaths, key: str) -> str:
    return os.path.join(cache_dir, f"{(paths.name or 'lineage')[:40]}-{key}.observed.json")


def cacheable(observed: Observed) -> bool:
    """Only a lineage found whole and in order is kept (its live parts are read again)."""
    return (observed.all_exist and observed.is_lineage and not observed.problems
            and observed.interrupted is None and not observed.full_walk
            and not observed.newest_unreadable and observed.held_by is None
            and observed.branches_read == {"lineage": observed.paths.branch,
                                           "observation": observed.paths.observation_branch})


_CONSTRAINTS = "constraints"
_PARSED: dict[bytes, Any] = {}  # constraints JSON text -> its value (shared, read only)
_PARSED_MAX = 64


def _split_constraints(observation: dict[str, Any] | None
                       ) -> tuple[dict[str, Any] | None, bytes]:
    """The observation with its constraints left as a null in their place, and their JSON
    text; the observation as it is and no text when its constraints are not an object."""
    if observation is None or not isinstance(observation.get(_CONSTRAINTS), dict):
        return observation, b""
    text = json.dumps(observation[_CONSTRAINTS], separators=(",", ":"), ensure_ascii=True)
    return {**observation, _CONSTRAINTS: None}, text.encode("ascii")


def _constraints(text: bytes) -> Any:
    """The value of a constraints text, parsed once per distinct text (``ValueError``)."""
    found = _PARSED.get(text)
    if found is None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        found = _PARSED[text] = json.loads(text)
    return found


def _joined_constraints(observation: Any, text: bytes) -> dict[str, Any] | None:
    """``_split_constraints`` undone (``ValueError`` for a record that is not its output)."""
    if not text:
        if observation is not None and not isinstance(observation, dict):
            raise ValueError("the newest observation is not an object")
        return observation
    if not (isinstance(observation, dict) and observation.get(_CONSTRAINTS, 0) is None):
        raise ValueError("the constraints text has no place")
    observation[_CONSTRAINTS] = _constraints(text)  # (in its place: a fresh parse's dict)
    return observation


def _body(observed: Observed, observation: dict[str, Any] | None) -> dict[str, Any]:
    """The record's body (``observation``: the newest, its constraints split off)."""
    last = observed.last_generation
    return {
        "root_commit": observed.root_commit, "lineage_metadata": observed.lineage_metadata,
        "observation_metadata": observed.observation_metadata,
        "lineage_head": observed.lineage_head, "observation_head": observed.observation_head,
        "head_branch": observed.head_branch, "generations": observed.generations,
        "last_generation": [last.number, last.status, last.commit] if last else None,
        "observed_generations": observed.observed_generations,
        "last_observation": observation,
        "probe_coverage": {digest: sorted(numbers)
                           for digest, numbers in observed.probe_coverage.items()},
        "probe_metrics": {digest: [[number, value] for number, value in sorted(found.items())]
                          for digest, found in observed.probe_metrics.items()},
    }


def _head_tree(observed: Observed, opened: Lineage | None) -> tuple[str | None, str | None]:
    """The lineage head's tree id and listing (``worktree.tree_listing``), or Nones."""
    repo = opened.lineage if opened is not None else None
    if repo is None or observed.lineage_head is None:
        return None, None
    try:
        commit = repo.commit(observed.lineage_head)
        if commit is None:
            return None, None
        return str(commit.tree_id), tree_listing(repo.raw, commit.tree)
    except READ_ERRORS:
        return None, None


def remember(cache_dir: Path | None, observed: Observed, found: Heads,
             opened: Lineage | None = None) -> None:
    """Keep ``observed`` (read at ``found``) when it is ``cacheable``; never fails.
    ``opened``: its repositories, to keep the head's tree listing too (the worktree is
    then checked against it without opening them)."""
    if cache_dir is None or not cacheable(observed) or not cache_dir.parent.is_dir():
        return  # (a state dir is never made for a cache)
    seal = cache_seal(cache_dir, create=True)
    if seal is None:
        return
    tree, listing = _head_tree(observed, opened)
    try:
        observation, constraints = _split_constraints(observed.last_observation)
        body = json.dumps({**_body(observed, observation), "lineage_tree": tree,
                           "lineage_listing": listing},
                          separators=(",", ":"), ensure_ascii=True).encode("ascii")
    except (TypeError, ValueError):  # a record that is not JSON: not kept
        return
    rest = body + b"\n" + constraints  # (compact JSON in ASCII holds no newline)
    key = cache_key(observed.paths)
    header = seal.sealed({"schema": SCHEMA, "key": key, "heads": _fields(found),
                          "body_sha256": hashlib.sha256(rest).hexdigest()})
    write_cache(Path(_file(cache_dir, observed.paths, key)),
                json.dumps(header, separators=(",", ":")).encode("ascii") + b"\n" + rest)


def _load(cache_dir: Path, paths: LineagePaths, seal: CacheSeal,
          found: Heads) -> tuple[dict[str, Any], bytes] | None:
    """The body of the record believed at ``found`` and its constraints text, or None."""
    try:
        key = cache_key(paths)
        data = read_regular(_file(cache_dir, paths, key), _HEADER_BYTES + _MAX_BYTES,
                            own_folder=True)
        if data is None:
            return None
        line, _, rest = data.partition(b"\n")
        header = json.loads(line) if len(line) < _HEADER_BYTES else None
        if not isinstance(header, dict) or header.get("heads") != _fields(found) or (
                header.get("schema") != SCHEMA or header.get("key") != key
                or not seal.opens(header)):
            return None
        if len(rest) > _MAX_BYTES or hashlib.sha256(rest).hexdigest() != header.get(
                "body_sha256"):
            return None
        data, _, constraints = rest.partition(b"\n")
        body = json.loads(data)
        return (body, constraints) if isinstance(body, dict) else None
    except (OSError, ValueError, TypeError):
        return None


def recall(cache_dir: Path | None, paths: LineagePaths, found: Heads) -> Recalled | None:
    """The record of ``paths`` read at exactly ``found``, as an ``Observed`` whose live
    parts (dirtiness, holder) are still to be read; None when there is none to believe."""
    seal = None if cache_dir is None else cache_seal(cache_dir, create=False)
    loaded = _load(cache_dir, paths, seal, found) if cache_dir is not None and seal else None
    if loaded is None:
        return None
    body, constraints = loaded
    try:
        last = body["last_generation"]
        observed = Observed(
            paths=paths, worktree_exists=True, git_dir_exists=True, observations_exist=True,
            is_lineage=True, root_commit=body["root_commit"],
            lineage_metadata=body["lineage_metadata"],
            observation_metadata=body["observation_metadata"],
            lineage_head=body["lineage_head"], observation_head=body["observation_head"],
            head_branch=body["head_branch"], generations=int(body["generations"]),
            last_generation=GenerationCommit(int(last[0]), last[1], str(last[2]))
            if last is not None else None,
            observed_generations=int(body["observed_generations"]),
            last_observation=_joined_constraints(body["last_observation"], constraints),
            dirty=False, dirty_paths=(),
            interrupted=None, problems=(), full_walk=False,
            branches_read={"lineage": paths.branch, "observation": paths.observation_branch},
            probe_coverage={digest: frozenset(int(n) for n in numbers)
                            for digest, numbers in body["probe_coverage"].items()},
            probe_metrics={digest: {int(n): value for n, value in pairs}
                           for digest, pairs in body["probe_metrics"].items()},
        )
        tree, listing = body.get("lineage_tree"), body.get("lineage_listing")
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, InvalidOperation):
        return None
    known = isinstance(tree, str) and isinstance(listing, str)
    return Recalled(observed, tree if known else None, listing if known else None)


def recorded(cached: Observed, found: Heads) -> Recorded | None:
    """The branches the lineage records, exactly as ``branches.recorded_branches`` reads
    them, from a record believed at ``found`` (``recall``); None when the record cannot
    tell (then they are read from the repositories).

    ``recorded_branches`` reads ``metadata.json`` at the commit of the branch the
    observation repository's HEAD names. When HEAD names the record's observation branch,
    that commit is the record's observation head (``found`` is every ref now), whose
    ``metadata.json`` the record holds, read when the record was made: the same object.
    """
    paths = cached.paths
    if found.observation_head_branch != paths.observation_branch:
        return None
    meta = cached.observation_metadata or {}
    lineage, observation = meta.get("lineage_branch"), meta.get("observation_branch")
    if not (isinstance(lineage, str) and lineage.strip() and isinstance(observation, str)
            and observation.strip()):
        return None
    where = f"{paths.observations}/{OBSERVATION_METADATA_FILE}"
    return Recorded(lineage, observation, where, where)
