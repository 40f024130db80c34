"""Forks, read: the parent generation a fork starts from, and the ancestry link verify checks.

Rule: read-only, pygit2 only, never raises for a damaged lineage. A parent is opened,
its branch head read once and its first-parent history walked from there: commits are
immutable, so nothing is locked and nothing of the parent is ever written. What cannot be
read is a ``ForkSource`` with a ``problem`` (plan refuses it) or an ``Ancestry`` whose
parent is not present (verify says so).

A fork's seed is its parent's generation tree with two kernel-owned files replaced
(docs/contract.md, "Forks"): ``.ouroboros-lineage.json`` (the child's own, with the
ancestry record under ``FORK_KEY``) and ``journal.md`` (``fork_journal``: a preface
naming the parent, then the parent's journal with every entry heading one level down,
so that neither ouro's journal reader nor the original instrument's sees a ``## gen``
heading before the child's own gen 1). Every other entry, modes included, is the
parent's object.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import pygit2

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import JOURNAL_FILE, METADATA_FILE, LineagePaths
from reconciler.state.holders import held_by

__all__ = [
    "BIRTH_SUFFIX",
    "FORK_KEY",
    "FORK_SCHEMA",
    "Ancestry",
    "ForkProblem",
    "ForkSource",
    "ancestry_record",
    "birth_cut_off",
    "birth_marker",
    "check_ancestry",
    "fork_journal",
    "fork_record",
    "holds_commit",
    "read_source",
    "recorded_ancestry",
    "seed_differences",
    "tree_blob",
]

FORK_KEY = "ouro_fork"  # in both metadata files and generation 1's ran_with
# Beside a fork's git dir while it is born: a fork found with it (and no apply holding
# the lineage) is a birth cut off midway, its places its leftovers (``birth_marker``).
BIRTH_SUFFIX = ".ouro-birth"
FORK_SCHEMA = "ouro-fork/v1"
ForkProblem = Literal["fork-unreadable", "fork-no-generation", "fork-death"]
_BARE = pygit2.enums.RepositoryOpenFlag.NO_SEARCH | pygit2.enums.RepositoryOpenFlag.BARE
_ERRORS = (pygit2.GitError, KeyError, ValueError, OSError, TypeError, UnicodeDecodeError,
           AttributeError)
# What the original instrument's reader takes for an entry heading (its regex, which
# ignores fences and whose \s spans lines); ouro's reader is ``formats.parse_journal``.
_ORIGINAL_HEADING = re.compile(r"^##\s+gen\s+\d+\s+[\u2014-]", re.MULTILINE)
_ATX_TWO = re.compile(r"(\A|\r)( {0,3})##(?=[ \t])")


@dataclass(frozen=True)
class ForkSource:
    """Generation ``generation`` of lineage ``parent``, as the fork would start from it."""

    parent: str
    generation: int
    problem: ForkProblem | None = None
    detail: str = ""  # why not (with ``problem``)
    root: str | None = None  # the parent's root commit
    branch: str = ""
    commit: str | None = None  # generation ``generation``'s commit
    metadata: dict[str, Any] = field(default_factory=dict)  # the parent's root metadata
    journal: bytes = b""  # journal.md at that commit
    generations: int = 0  # the parent's generations now

    @property
    def kernel(self) -> dict[str, Any]:
        """The parent's kernel, as its root metadata records it."""
        meta = self.metadata
        return {"commit": meta.get("instrument_commit"),
                "fingerprint": meta.get("instrument_fingerprint"),
                "repository": meta.get("instrument_repository")}


def birth_marker(git_dir: str | os.PathLike[str]) -> Path:
    """The file that says a fork's birth began at ``git_dir`` and has not ended: written
    before the fork's first place is made, removed once all three are whole."""
    where = Path(os.path.abspath(git_dir))
    return where.with_name(where.name + BIRTH_SUFFIX)


def birth_cut_off(paths: LineagePaths) -> bool:
    """A fork's birth at ``paths`` began and never ended (killed midway), and no apply
    holds the lineage now: what its places hold is the birth's leftovers, made again."""
    return os.path.lexists(birth_marker(paths.git_dir)) and held_by(paths.git_dir) is None


def _subject(commit: pygit2.Commit) -> str:
    return commit.message.split("\n", 1)[0]


@lru_cache(maxsize=64)
def _chain(git_dir: str, head: str) -> tuple[tuple[str, str], ...]:
    """(commit id, subject) of first-parent history, root first; cached by head (a set of
    a hundred forks of one parent reads its history once)."""
    repo = pygit2.Repository(git_dir, _BARE)
    found: list[tuple[str, str]] = []
    commit = repo.get(head)
    while isinstance(commit, pygit2.Commit):
        found.append((str(commit.id), _subject(commit)))
        commit = repo.get(commit.parent_ids[0]) if commit.parent_ids else None
    return tuple(reversed(found))


def _generation_commits(chain: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """Generation k (1-based) at index k-1: (commit id, subject)."""
    return [item for item in chain if formats.is_generation_subject(item[1])]


def tree_blob(repo: pygit2.Repository, tree: pygit2.Tree, name: str) -> bytes | None:
    try:
        entry = tree[name]
    except KeyError:
        return None
    found = repo.get(entry.id)
    return bytes(found.data) if isinstance(found, pygit2.Blob) else None


def _json(data: bytes | None) -> dict[str, Any]:
    try:
        value = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _open(paths: LineagePaths) -> tuple[pygit2.Repository, str] | None:
    """The parent's repository and head id (None: not readable as a lineage)."""
    if not os.path.isdir(paths.git_dir):
        return None
    try:
        repo = pygit2.Repository(str(paths.git_dir), _BARE)
        head = repo.lookup_reference(f"refs/heads/{paths.branch}").resolve().target
    except _ERRORS:
        return None
    return repo, str(head)


def read_source(parent: LineagePaths, generation: int) -> ForkSource:
    """Generation ``generation`` of the lineage at ``parent``: its commit, the parent's
    root and metadata, the journal then; or the problem that makes it no fork source."""
    name = parent.name or parent.label
    opened = _open(parent)
    if opened is None and not any(os.path.lexists(place) for place in (
            parent.worktree, parent.git_dir, parent.observations)):
        return ForkSource(name, generation, "fork-no-generation",
                          f"lineage {name} does not exist (yet) at {parent.worktree}")
    if opened is None:
        return ForkSource(name, generation, "fork-unreadable",
                          f"no readable lineage at {parent.git_dir} (branch {parent.branch})")
    repo, head = opened
    try:
        chain = _chain(str(parent.git_dir), head)
        numbered = _generation_commits(chain)
        root = repo.get(chain[0][0])
        assert isinstance(root, pygit2.Commit)
        metadata = _json(tree_blob(repo, root.tree, METADATA_FILE))
    except (*_ERRORS, IndexError, AssertionError) as error:
        return ForkSource(name, generation, "fork-unreadable",
                          f"its history does not read ({type(error).__name__}): run "
                          f"`ouro verify` on {name}")
    base = ForkSource(name, generation, root=chain[0][0], branch=parent.branch,
                      metadata=metadata, generations=len(numbered))
    if generation > len(numbered):
        return _with(base, "fork-no-generation",
                     f"lineage {name} has {len(numbered)} generation"
                     f"{'' if len(numbered) == 1 else 's'}, no gen {generation}")
    commit_id, subject = numbered[generation - 1]
    parsed = formats.parse_generation_subject(subject)
    if parsed is None or parsed.status == "died":
        return _with(base, "fork-death",
                     f"gen {generation} of {name} is a death ({subject!r}): its tree was "
                     "not published", commit=commit_id)
    try:
        commit = repo.get(commit_id)
        assert isinstance(commit, pygit2.Commit)
        journal = tree_blob(repo, commit.tree, JOURNAL_FILE) or b""
    except (*_ERRORS, AssertionError) as error:
        return _with(base, "fork-unreadable", f"gen {generation} of {name} does not read "
                     f"({type(error).__name__})", commit=commit_id)
    return ForkSource(name, generation, None, "", base.root, base.branch, commit_id,
                      metadata, journal, len(numbered))


def _with(base: ForkSource, problem: ForkProblem, detail: str,
          commit: str | None = None) -> ForkSource:
    return ForkSource(base.parent, base.generation, problem, detail, base.root, base.branch,
                      commit, base.metadata, b"", base.generations)


# ---------------------------------------------------------------- the record and the seed


def fork_record(source: ForkSource, kernel: Literal["running", "parent"],
                fingerprint: str) -> dict[str, Any]:
    """The ancestry record (``FORK_KEY``) of a child born from ``source`` under a kernel of
    ``fingerprint``: whether its physics are the parent's is a fact, not the spec's word."""
    parent_kernel = source.kernel
    return {
        "schema": FORK_SCHEMA,
        "parent": source.parent,
        "parent_root": source.root,
        "parent_branch": source.branch,
        "generation": source.generation,
        "commit": source.commit,
        "parent_kernel": {"commit": parent_kernel["commit"],
                          "fingerprint": parent_kernel["fingerprint"]},
        "kernel": kernel,
        "same_physics": parent_kernel["fingerprint"] == fingerprint,
    }


def _demoted(text: str) -> str:
    """``text`` with every line either journal reader takes for an entry heading one level
    down (``## gen`` -> ``### gen``); nothing else changes."""
    text = _ORIGINAL_HEADING.sub(lambda match: "#" + match.group(0), text)
    lines = text.split("\n")
    for heading in formats.parse_journal(text):
        lines[heading.line - 1] = _ATX_TWO.sub(r"\1\2###", lines[heading.line - 1])
    return "\n".join(lines)


def fork_journal(parent_journal: bytes, record: Mapping[str, Any]) -> bytes:
    """The child's seed ``journal.md``: a preface naming its parent, then the parent's
    journal with its entry headings one level down (the child's own gen 1 is its first
    ``## gen`` heading for both readers)."""
    text = parent_journal.decode("utf-8", "surrogateescape")
    preface = (f"# forked from {record.get('parent')} at gen {record.get('generation')}\n\n"
               f"parent root {record.get('parent_root')}, commit {record.get('commit')}; "
               f"its journal until then, each entry one level down:\n")
    body = _demoted(text)
    if body and not body.startswith("\n"):
        body = "\n" + body
    return (preface + body).encode("utf-8", "surrogateescape")


def ancestry_record(metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A lineage's ancestry record from its root metadata (None: not a fork)."""
    record = (metadata or {}).get(FORK_KEY)
    return record if isinstance(record, dict) else None


def recorded_ancestry(paths: LineagePaths) -> dict[str, Any] | None:
    """A lineage's ancestry record read in one blob: its observation metadata's (the
    observation branch head's, which verify holds equal to the root's), else, when that
    does not read, its root metadata's (a walk to the root). None: not a fork."""
    found = _observation_metadata(paths)
    if found:
        return ancestry_record(found)
    from reconciler.state.birth import birth

    return ancestry_record(birth(paths).metadata)


def holds_commit(paths: LineagePaths, commit: object) -> bool:
    """The lineage at ``paths`` has commit ``commit`` (a fork's parent is the recorded one:
    another lineage born under its name has not)."""
    opened = _open(paths) if isinstance(commit, str) else None
    if opened is None:
        return False
    try:
        return isinstance(opened[0].get(str(commit)), pygit2.Commit)
    except _ERRORS:
        return False


def seed_differences(repo: pygit2.Repository, seed: pygit2.Tree, parent_repo: pygit2.Repository,
                     parent_tree: pygit2.Tree, record: Mapping[str, Any]) -> list[str]:
    """What differs between a child's seed tree and what a fork of ``parent_tree`` is
    (every entry the parent's object with its mode, but the metadata and the journal);
    empty when the seed is exactly the fork."""
    mine = {str(entry.name): (str(entry.id), entry.filemode) for entry in seed}
    theirs = {str(entry.name): (str(entry.id), entry.filemode) for entry in parent_tree}
    found = [f"{name}: only in the parent" for name in sorted(set(theirs) - set(mine))
             if name != METADATA_FILE]
    found += [f"{name}: only in the seed" for name in sorted(set(mine) - set(theirs))
              if name not in (METADATA_FILE, JOURNAL_FILE)]
    for name in sorted(set(mine) & set(theirs)):
        if name not in (METADATA_FILE, JOURNAL_FILE) and mine[name] != theirs[name]:
            found.append(f"{name}: differs")
    wanted = fork_journal(tree_blob(parent_repo, parent_tree, JOURNAL_FILE) or b"", record)
    if tree_blob(repo, seed, JOURNAL_FILE) != wanted:
        found.append(f"{JOURNAL_FILE}: not the parent's journal under the fork's preface")
    return found


# ---------------------------------------------------------------- verify


@dataclass(frozen=True)
class Ancestry:
    """verify's reading of one fork's link: ``present`` False is "parent not present"."""

    record: dict[str, Any]
    present: bool
    findings: tuple[str, ...] = ()  # ("fork-parent-commit" | "fork-seed-mismatch" | ...)
    detail: str = ""

    @property
    def verdict(self) -> str:
        """``linked``, ``parent-not-present`` or ``broken`` (findings)."""
        if self.findings:
            return "broken"
        return "linked" if self.present else "parent-not-present"


def _root(repo: pygit2.Repository, branch: str) -> pygit2.Commit | None:
    try:
        commit = repo.get(repo.lookup_reference(f"refs/heads/{branch}").resolve().target)
        while isinstance(commit, pygit2.Commit) and commit.parent_ids:
            commit = repo.get(commit.parent_ids[0])
    except _ERRORS:
        return None
    return commit if isinstance(commit, pygit2.Commit) else None


def check_ancestry(child: LineagePaths,
                   places: Callable[[str], LineagePaths | None]) -> Ancestry | None:
    """The ancestry link of the lineage at ``child`` (None: not a fork, or its root does
    not read: the audit says so). ``places(name)``: where a lineage of the recorded
    parent's name lives, if one is known; it is the parent only when its root is the
    recorded one. Both metadata files must carry the same record."""
    try:
        repo = pygit2.Repository(str(child.git_dir), _BARE)
    except _ERRORS:
        return None
    seed = _root(repo, child.branch)
    if seed is None:
        return None
    metadata = _json(tree_blob(repo, seed.tree, METADATA_FILE))
    record = ancestry_record(metadata)
    if record is None:
        return None
    name = str(record.get("parent"))
    if ancestry_record(_observation_metadata(child)) != record:
        return Ancestry(record, False, ("fork-record-disagrees",),
                        "the observation metadata's ancestry is not the lineage's")
    parent = places(name)
    if parent is None or _open(parent) is None:
        return Ancestry(record, False, detail=f"parent not present (no lineage {name} found)")
    parent_repo = pygit2.Repository(str(parent.git_dir), _BARE)
    parent_root = _root(parent_repo, parent.branch)
    if parent_root is None or str(parent_root.id) != record.get("parent_root"):
        return Ancestry(record, False, detail=(
            f"parent not present (lineage {name} here was born at "
            f"{str(parent_root.id)[:12] if parent_root else 'an unreadable root'}, not "
            f"{str(record.get('parent_root'))[:12]})"))
    return _linked(repo, seed, parent_repo, parent, record)


def _observation_metadata(paths: LineagePaths) -> dict[str, Any]:
    try:
        repo = pygit2.Repository(str(paths.observations),
                                 pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        commit = repo.get(repo.lookup_reference(
            f"refs/heads/{paths.observation_branch}").resolve().target)
        assert isinstance(commit, pygit2.Commit)
        return _json(tree_blob(repo, commit.tree, formats.OBSERVATION_METADATA_FILE))
    except (*_ERRORS, AssertionError):
        return {}


def _linked(repo: pygit2.Repository, seed: pygit2.Commit, parent_repo: pygit2.Repository,
            parent: LineagePaths, record: dict[str, Any]) -> Ancestry:
    """The parent is present: its generation N is the recorded commit, whose tree is the seed."""
    opened = _open(parent)
    assert opened is not None
    numbered = _generation_commits(_chain(str(parent.git_dir), opened[1]))
    number, commit_id = record.get("generation"), record.get("commit")
    if (not isinstance(number, int) or not 1 <= number <= len(numbered)
            or numbered[number - 1][0] != commit_id):
        return Ancestry(record, True, ("fork-parent-commit",),
                        f"commit {str(commit_id)[:12]} is not gen {number} of "
                        f"{record.get('parent')}")
    commit = parent_repo.get(str(commit_id))
    if not isinstance(commit, pygit2.Commit):
        return Ancestry(record, True, ("fork-parent-commit",), "the commit does not read")
    differences = seed_differences(repo, seed.tree, parent_repo, commit.tree, record)
    if differences:
        return Ancestry(record, True, ("fork-seed-mismatch",), "; ".join(differences[:5]))
    return Ancestry(record, True)
