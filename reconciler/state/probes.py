"""Probe records: read from the observation repository's ``probes/<lineage branch>``.

Rule: records live beside the observations, never on the observation branch (the
original instrument's reader validates that branch and must keep doing so). The
branch's tree is ``<digest>/probe.json`` (name, digest body), ``<digest>/files``
(the probe's files as measured with, when it had any) and
``<digest>/generations/<NNNNNN>.json`` (one record per generation). Reading never
raises for a damaged branch: what cannot be read is not coverage (it is measured
again only if its record is missing; ``ouro verify`` says what is wrong).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pygit2

from reconciler.errors import StateError
from reconciler.kernel.base import formats
from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.probe_digest import digest_of
from reconciler.state.probe_rules import record_problem
from reconciler.state.repos import READ_ERRORS, Repo, first_line, open_repo

__all__ = [
    "BRANCH_PREFIX",
    "ProbeRecord",
    "ProbeTable",
    "check_records",
    "columns",
    "coverage",
    "generation_commits",
    "head",
    "latest",
    "metrics",
    "probe_branch",
    "record_name",
    "records",
    "seed_commit",
    "table",
]

BRANCH_PREFIX = "probes/"
GENERATIONS = "generations"
PROBE_FILE = "probe.json"
FILES = "files"


def probe_branch(lineage_branch: str) -> str:
    return BRANCH_PREFIX + lineage_branch


def record_name(generation: int) -> str:
    return f"{generation:06d}.json"


@dataclass(frozen=True)
class ProbeRecord:
    digest: str
    generation: int
    record: dict[str, Any]  # as stored (``engine.probes.records`` writes it)
    probe: dict[str, Any]  # the digest's probe.json


def _head_tree(paths: LineagePaths,
               repo: Repo | None = None) -> tuple[Repo, pygit2.Tree] | None:
    """The probe branch's tree (``repo``: the observations, when already opened)."""
    repo = open_repo(paths.observations) if repo is None else repo
    try:
        head = repo.head(probe_branch(paths.branch)) if repo is not None else None
    except StateError:
        return None
    return (repo, head.tree) if repo is not None and head is not None else None


def _json(repo: Repo, oid: pygit2.Oid) -> Any:
    try:
        return repo.json_of(oid, str(oid), limit=1 << 20)
    except StateError:
        return None


def _digests(repo: Repo, tree: pygit2.Tree) -> Iterator[tuple[str, pygit2.Tree]]:
    for item in tree:
        if item.filemode == pygit2.enums.FileMode.TREE and item.name:
            folder = repo.tree(tree, item.name)
            if folder is not None:
                yield item.name, folder


def _numbers(repo: Repo, folder: pygit2.Tree) -> Iterator[tuple[int, pygit2.Oid]]:
    generations = repo.tree(folder, GENERATIONS)
    for item in generations if generations is not None else ():
        name = item.name or ""
        stem = name.removesuffix(".json")
        if name.endswith(".json") and stem.isdigit() and record_name(int(stem)) == name:
            yield int(stem), item.id


def head(paths: LineagePaths) -> str | None:
    """The commit ``probes/<lineage branch>`` points at (None: no records), from the ref
    alone: what changes when a record is written."""
    repo = open_repo(paths.observations)
    found = repo.head_id(probe_branch(paths.branch)) if repo is not None else None
    return str(found) if found is not None else None


def coverage(paths: LineagePaths,
             repo: Repo | None = None) -> dict[str, frozenset[int]]:
    """digest -> the generations it has a record of (empty: no branch, unreadable);
    ``repo``: the observations, when already opened."""
    found = _head_tree(paths, repo)
    if found is None:
        return {}
    repo, tree = found
    try:
        return {digest: frozenset(n for n, _ in _numbers(repo, folder))
                for digest, folder in _digests(repo, tree)}
    except StateError:
        return {}


def records(paths: LineagePaths, repo: Repo | None = None) -> list[ProbeRecord]:
    """Every readable record that holds what ouro's writer writes
    (``probe_rules.record_problem``: a forged one is believed by no reader; ``ouro
    verify`` names it), by digest then generation."""
    found = _head_tree(paths, repo)
    if found is None:
        return []
    repo, tree = found
    out: list[ProbeRecord] = []
    for digest, folder in sorted(_digests(repo, tree)):
        probe = _json(repo, folder[PROBE_FILE].id) if PROBE_FILE in folder else None
        for number, oid in sorted(_numbers(repo, folder)):
            record = _json(repo, oid)
            if isinstance(record, dict) and record_problem(record) is None:
                out.append(ProbeRecord(digest, number, record,
                                       probe if isinstance(probe, dict) else {}))
    return out


def generation_commits(paths: LineagePaths) -> list[str]:
    """The lineage's generation commits, oldest first (index 0 is generation 1), read
    from its git dir's branch (first parents). Empty when it cannot be read."""
    repo = open_repo(paths.git_dir, bare=True)
    try:
        head = repo.head(paths.branch) if repo is not None else None
        found = [str(commit.id) for commit in repo.first_parents(head)
                 if formats.is_generation_subject(first_line(commit))] \
            if repo is not None and head is not None else []
    except StateError:
        return []
    found.reverse()
    return found


def seed_commit(paths: LineagePaths) -> str | None:
    """The lineage's seed (generation 0): the root of its branch's first-parent line, when
    that root is no generation commit (a lineage's root is its ``seed`` commit; a fork's
    holds the parent's generation it was born from, byte for byte). None when it cannot
    be read."""
    repo = open_repo(paths.git_dir, bare=True)
    try:
        head = repo.head(paths.branch) if repo is not None else None
        root = repo.root(head) if repo is not None and head is not None else None
    except StateError:
        return None
    if root is None or formats.is_generation_subject(first_line(root)):
        return None
    return str(root.id)


def metrics(paths: LineagePaths,
            repo: Repo | None = None) -> dict[str, dict[int, dict[str, Any] | None]]:
    """digest -> generation -> its metrics (None: a probe failure or an unreadable record)."""
    found: dict[str, dict[int, dict[str, Any] | None]] = {}
    for item in records(paths, repo):
        value = item.record.get("metrics")
        ok = item.record.get("failure") is None and isinstance(value, dict)
        found.setdefault(item.digest, {})[item.generation] = value if ok else None
    return found


def _current_digests(paths: LineagePaths, names: set[str]) -> dict[str, str]:
    """name -> the digest its newest record was measured at (a changed probe's old
    results are history; a renamed one keeps its digest)."""
    repo = open_repo(paths.observations)
    found: dict[str, str] = {}
    target = repo.head_id(probe_branch(paths.branch)) if repo is not None else None
    if repo is None or target is None:
        return found
    try:  # the probe branch's head was checked whole when its records were read
        for commit in repo.raw.walk(target, pygit2.enums.SortMode.TOPOLOGICAL):
            words = commit.message.split(":", 1)[0].split()
            if len(words) == 3 and words[0] == "probe" and words[1] not in found:
                found[words[1]] = words[2]
            if names <= found.keys():  # (a forged record's commit may name another)
                break
    except READ_ERRORS:
        pass
    return found


def latest(paths: LineagePaths) -> dict[int, list[ProbeRecord]]:
    """generation -> its records at each probe's current digest, by probe name."""
    every = records(paths)
    current = _current_digests(paths, {str(r.record.get("probe")) for r in every})
    out: dict[int, list[ProbeRecord]] = {}
    for item in sorted(every, key=lambda r: (r.generation, str(r.record.get("probe")))):
        name = str(item.record.get("probe"))
        if item.digest.startswith(current.get(name, "-")):
            out.setdefault(item.generation, []).append(item)
    return out


def columns(paths: LineagePaths) -> dict[int, dict[str, Any]]:
    """generation -> ``probe.<name>.<metric>`` -> value (docs/export.md)."""
    out: dict[int, dict[str, Any]] = {}
    for number, found in latest(paths).items():
        row = out.setdefault(number, {})
        for item in found:
            metrics = item.record.get("metrics")
            if item.record.get("failure") is None and isinstance(metrics, dict):
                for metric, value in metrics.items():
                    row[f"probe.{item.record.get('probe')}.{metric}"] = value
    return out


def check_records(paths: LineagePaths, generations: Mapping[int, str]) -> list[tuple[str, int]]:
    """``ouro verify``'s findings about the probe records (commit | digest | invalid | a
    rule of ``probe_rules.RULES``, generation): each names its generation's commit of this
    lineage, each digest is its probe.json's body's (with the files tree stored beside
    it), and each holds what ouro's writer writes."""
    found: list[tuple[str, int]] = []
    head = _head_tree(paths)
    if head is None:
        return found
    repo, tree = head
    for digest, folder in _digests(repo, tree):
        probe = _json(repo, folder[PROBE_FILE].id) if PROBE_FILE in folder else None
        probe = probe if isinstance(probe, dict) else {}
        body = probe.get("body")
        files = folder[FILES].id if FILES in folder else None
        digest_ok = (isinstance(body, dict) and probe.get("digest") == digest
                     and digest_of(body) == digest
                     and body.get("files") == (str(files) if files is not None else None))
        for number, oid in _numbers(repo, folder):
            record = _json(repo, oid)
            if not isinstance(record, dict):
                found.append(("invalid", number))
                continue
            broken = record_problem(record)
            if broken is not None:
                found.append((broken[0], number))
            if not digest_ok or record.get("digest") != digest:
                found.append(("digest", number))
            if record.get("generation") != number or generations.get(number) is None \
                    or record.get("commit") != generations[number]:
                found.append(("commit", number))
    return found


FAILURE_CHARS = 200  # a probe failure's reason as a table keeps it
STDERR_SHOWN = 1_024  # the end of a failed probe's stderr as a table keeps it


@dataclass(frozen=True)
class ProbeTable:
    """What the probes measured, at each probe's current digest (``latest``): each
    ``probe.<name>.<metric>`` column's values by generation, each probe's failures
    (generation -> reason, cut at ``FAILURE_CHARS``), and each column's probe (a forged
    record's name may hold a '.')."""

    values: dict[str, dict[int, Any]]
    failures: dict[str, dict[int, str]]
    probe_of: dict[str, str] = field(default_factory=dict)
    # each failure's end of stderr, as its record keeps it (``stderr_tail``), cut to its
    # last STDERR_SHOWN characters (probe -> generation -> text; absent: none recorded)
    stderr_tails: dict[str, dict[int, str]] = field(default_factory=dict)

    def plottable(self) -> list[str]:
        """The columns with at least one number or boolean, sorted."""
        return sorted(column for column, found in self.values.items()
                      if any(isinstance(value, int | float) for value in found.values()))


def table(paths: LineagePaths) -> ProbeTable:
    """The lineage's ``ProbeTable`` (empty: no records, or none readable)."""
    values: dict[str, dict[int, Any]] = {}
    failures: dict[str, dict[int, str]] = {}
    probe_of: dict[str, str] = {}
    tails: dict[str, dict[int, str]] = {}
    for number, found in latest(paths).items():
        for item in found:
            name = str(item.record.get("probe"))
            measured = item.record.get("metrics")
            failure = item.record.get("failure")
            if failure is not None or not isinstance(measured, dict):
                reason = str(failure) if failure is not None else "no metrics recorded"
                failures.setdefault(name, {})[number] = reason[:FAILURE_CHARS]
                tail = item.record.get("stderr_tail")
                if isinstance(tail, str) and tail.strip():
                    tails.setdefault(name, {})[number] = tail[-STDERR_SHOWN:]
                continue
            for metric, value in measured.items():
                values.setdefault(f"probe.{name}.{metric}", {})[number] = value
                probe_of[f"probe.{name}.{metric}"] = name
    return ProbeTable(values, failures, probe_of, tails)
