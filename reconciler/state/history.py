"""One generation in detail: its journal entry, its diff, the body that ran, its record.

Rule: read-only (pygit2), bounded where asked. Everything returned is text the
organism (or a model) may have written: hostile. Callers render it escaped,
never as markup.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pygit2

from reconciler.errors import StateError
from reconciler.kernel.base import formats
from reconciler.kernel.base.config import JOURNAL_FILE, ORGANISM_FILE, LineagePaths
from reconciler.state.repos import Lineage, Repo, open_repo
from reconciler.state.summaries import GenerationRow, LineageSummary

__all__ = [
    "SHOW_LIMITS",
    "DiffLimits",
    "FileDiff",
    "GenerationDetail",
    "detail",
    "diff_commits",
    "diff_generations",
    "journal_entry",
    "raw_diff",
    "record",
]

MAX_PATCH_CHARS = 200_000  # one file's patch beyond this is cut (and says so)


@dataclass(frozen=True)
class FileDiff:
    old_path: str
    new_path: str
    status: str  # added, deleted, modified, renamed, ...
    added: int
    deleted: int
    patch: str  # unified diff text ("" for a binary file)
    binary: bool


@dataclass(frozen=True)
class DiffLimits:
    """How much of a generation a bounded reader (the viewer) loads: the first ``files``
    files with their patches, each patch cut at ``patch_chars``, all patches together at
    most ``total_chars`` (a file beyond that is listed without its patch), the body the
    generation ran cut at ``body_chars``. Nothing larger is ever decoded."""

    files: int
    patch_chars: int
    total_chars: int
    body_chars: int


# What `ouro show` reads of a generation's diff without --full (issue 36: a 100 MB diff
# took 67 s and 760 MB): the rest is one `ouro diff NAME A B` (or `show --full`) away.
SHOW_LIMITS = DiffLimits(files=2_000, patch_chars=64 << 10, total_chars=256 << 10,
                         body_chars=4 << 20)
_CUT = ("\n... (cut at ", "... (not shown")  # what ``_files`` and ``_unread`` say of a cut


@dataclass(frozen=True)
class GenerationDetail:
    row: GenerationRow
    commit: str
    parent: str | None  # the previous generation's commit (or the seed)
    journal_entry: str | None
    diff: tuple[FileDiff, ...]
    body: str | None  # organism.el as committed by the previous generation: the body that ran
    record: dict[str, Any] | None  # the observation, as recorded
    files_total: int = 0  # files the diff changes (``diff`` may list fewer: DiffLimits)
    diff_cut: bool = False  # ``diff`` is not all of it (DiffLimits): files or patches cut
    body_chars: int | None = None  # characters of the whole body, when cut (DiffLimits)


def _lineage_repo(paths: LineagePaths) -> Repo:
    repo = open_repo(paths.git_dir, bare=True)
    if repo is None:
        raise StateError(f"ouro: {paths.git_dir} cannot be read as a git repository")
    return repo


def _commit(repo: Repo, oid: str) -> pygit2.Commit:
    commit = repo.commit(oid)
    if commit is None:
        raise StateError(f"ouro: commit {oid} is missing from the lineage; run `ouro verify`")
    return commit


def _text(repo: pygit2.Repository, commit: pygit2.Commit, path: str,
          limit: int | None = None) -> str | None:
    """The blob at ``path`` as text; its first ``limit`` bytes only, when given."""
    try:
        blob = repo.get(commit.tree[path].id)
    except KeyError:
        return None
    if not isinstance(blob, pygit2.Blob):
        return None
    if limit is not None and blob.size > limit:
        with pygit2.BlobIO(blob) as stream:
            return stream.read(limit).decode("utf-8", errors="replace")
    return bytes(blob.data).decode("utf-8", errors="replace")


def _blob_size(repo: pygit2.Repository, commit: pygit2.Commit, path: str) -> int | None:
    try:
        blob = repo.get(commit.tree[path].id)
    except KeyError:
        return None
    return blob.size if isinstance(blob, pygit2.Blob) else None


def journal_entry(journal: str, generation: int) -> str | None:
    """Generation ``generation``'s entry: its heading line up to the next heading."""
    headings = formats.parse_journal(journal)
    lines = journal.split("\n")
    for index, heading in enumerate(headings):
        if heading.number == generation:
            end = headings[index + 1].line - 1 if index + 1 < len(headings) else len(lines)
            return "\n".join(lines[heading.line - 1:end]).rstrip("\n")
    return None


_STATUS = {
    pygit2.enums.DeltaStatus.ADDED: "added",
    pygit2.enums.DeltaStatus.DELETED: "deleted",
    pygit2.enums.DeltaStatus.MODIFIED: "modified",
    pygit2.enums.DeltaStatus.RENAMED: "renamed",
    pygit2.enums.DeltaStatus.TYPECHANGE: "typechange",
}


def _tree_diff(old: pygit2.Commit | None, new: pygit2.Commit) -> pygit2.Diff:
    if old is None:
        return new.tree.diff_to_tree(swap=True)
    return old.tree.diff_to_tree(new.tree, context_lines=3)


def diff_commits(repo: pygit2.Repository, old: pygit2.Commit | None,
                 new: pygit2.Commit, limits: DiffLimits | None = None) -> tuple[FileDiff, ...]:
    """The tree diff old -> new (the empty tree when ``old`` is None), file by file;
    within ``limits`` when given (a patch is made only for a file that is listed)."""
    return _files(repo, _tree_diff(old, new), limits)


def _size(repo: pygit2.Repository, file: pygit2.DiffFile) -> int:
    """A blob's size from its header alone (no content is loaded); 0 for none."""
    try:
        return int(repo.odb.read_header(file.id)[1])
    except (KeyError, ValueError, pygit2.GitError):
        return 0


def _unread(repo: pygit2.Repository, delta: pygit2.DiffDelta,
            limits: DiffLimits) -> FileDiff | None:
    """A file listed without a patch, when its blobs are too large to make a bounded patch
    of (nothing is loaded); None when it is not."""
    size = max(_size(repo, delta.old_file), _size(repo, delta.new_file))
    if size <= 8 * limits.patch_chars:
        return None
    return FileDiff(
        old_path=str(delta.old_file.path), new_path=str(delta.new_file.path),
        status=_STATUS.get(delta.status, str(delta.status)), added=0, deleted=0,
        patch=f"... (not shown: a file of {size} bytes, beyond {8 * limits.patch_chars} "
              "to diff here)\n", binary=bool(delta.is_binary))


def _files(repo: pygit2.Repository, diff: pygit2.Diff,
           limits: DiffLimits | None) -> tuple[FileDiff, ...]:
    found: list[FileDiff] = []
    per_file = limits.patch_chars if limits is not None else MAX_PATCH_CHARS
    budget = limits.total_chars if limits is not None else None
    shown = min(len(diff), limits.files) if limits is not None else len(diff)
    for index, delta in enumerate(itertools.islice(diff.deltas, shown)):
        unread = _unread(repo, delta, limits) if limits is not None else None
        if unread is not None:
            found.append(unread)
            continue
        patch = diff[index]
        if patch is None:
            continue
        delta = patch.delta
        binary = bool(delta.is_binary)
        text = "" if binary else (patch.text or "")
        if len(text) > per_file:
            text = text[:per_file] + f"\n... (cut at {per_file} characters)\n"
        if budget is not None and len(text) > budget:
            text = "... (not shown: this page's characters of diff are spent)\n"
        elif budget is not None:
            budget -= len(text)
        _context, added, deleted = patch.line_stats
        found.append(FileDiff(
            old_path=str(delta.old_file.path), new_path=str(delta.new_file.path),
            status=_STATUS.get(delta.status, str(delta.status)), added=int(added),
            deleted=int(deleted), patch=text, binary=binary,
        ))
    return tuple(found)


def _previous(repo: Repo, summary: LineageSummary, generation: int) -> pygit2.Commit | None:
    """The previous generation's commit, or the seed (root) for generation 1."""
    if generation > 1:
        return _commit(repo, summary.rows[generation - 2].lineage_commit)
    try:
        return repo.root(_commit(repo, summary.rows[0].lineage_commit))
    except StateError:
        return None


def record(paths: LineagePaths, generation: int) -> dict[str, Any] | None:
    """Generation ``generation``'s observation as recorded (None: none, or unreadable)."""
    try:
        return Lineage(paths).observation(generation)
    except StateError:
        return None


def _range(summary: LineageSummary) -> str:
    if not summary.generations:
        problems = f": {summary.problems[0]}" if summary.problems else ""
        return f"it has none yet{problems}"
    return f"it has {summary.generations}: 1..{summary.generations}"


def raw_diff(paths: LineagePaths, summary: LineageSummary, generation: int,
             limit: int) -> str:
    """Generation ``generation``'s whole diff as one text, cut at ``limit`` characters
    (each file's patch made, kept only while it fits, and dropped)."""
    row = summary.row(generation)
    if row is None:
        raise StateError(f"ouro: lineage {summary.name} has no generation {generation} "
                         f"({_range(summary)})")
    repo = _lineage_repo(paths)
    commit = _commit(repo, row.lineage_commit)
    diff = _tree_diff(_previous(repo, summary, generation), commit)
    parts: list[str] = []
    size = 0
    for index, delta in enumerate(diff.deltas):
        blob = max(_size(repo.raw, delta.old_file), _size(repo.raw, delta.new_file))
        if blob > limit:  # never made: its patch alone would pass the bound
            text = f"... ({delta.new_file.path}: a file of {blob} bytes, not shown)\n"
        else:
            patch = diff[index]
            text = (patch.text or "") if patch is not None else ""
        if size + len(text) > limit:
            parts.append(text[:max(0, limit - size)])
            parts.append(f"\n... (cut at {limit} characters; {len(diff) - index} of "
                         f"{len(diff)} files not (wholly) shown)\n")
            break
        parts.append(text)
        size += len(text)
    return "".join(parts)


def detail(paths: LineagePaths, summary: LineageSummary, generation: int,
           limits: DiffLimits | None = None) -> GenerationDetail:
    """Everything ``ouro show`` and the viewer show of one generation (within ``limits``)."""
    row = summary.row(generation)
    if row is None:
        raise StateError(f"ouro: lineage {summary.name} has no generation {generation} "
                         f"({_range(summary)})")
    repo = _lineage_repo(paths)
    commit = _commit(repo, row.lineage_commit)
    previous = _previous(repo, summary, generation)
    journal = _text(repo.raw, commit, JOURNAL_FILE)
    diff = _tree_diff(previous, commit)
    ran = commit
    if commit.parent_ids:
        parent = repo.commit(commit.parent_ids[0])
        if parent is not None:
            ran = parent  # the tree the generation started from: what it loaded
    files = _files(repo.raw, diff, limits)
    return GenerationDetail(
        row=row,
        commit=str(commit.id),
        parent=str(previous.id) if previous is not None else None,
        journal_entry=journal_entry(journal, generation) if journal is not None else None,
        diff=files,
        body=_text(repo.raw, ran, ORGANISM_FILE, limits.body_chars if limits else None),
        record=record(paths, generation),
        files_total=len(diff),
        diff_cut=limits is not None and (len(files) < len(diff) or any(
            mark in item.patch for item in files for mark in _CUT)),
        body_chars=_blob_size(repo.raw, ran, ORGANISM_FILE) if limits else None,
    )


def diff_generations(paths: LineagePaths, summary: LineageSummary, first: int,
                     second: int, limits: DiffLimits | None = None) -> tuple[FileDiff, ...]:
    """The tree diff between two generations' commits (0 is the seed), within ``limits``."""
    repo = _lineage_repo(paths)
    commits = []
    for number in (first, second):
        if number == 0:
            commits.append(_previous(repo, summary, 1) if summary.rows else None)
            continue
        row = summary.row(number)
        if row is None:
            raise StateError(f"ouro: lineage {summary.name} has no generation {number} "
                             f"({_range(summary)}; 0 is the seed)")
        commits.append(_commit(repo, row.lineage_commit))
    new = commits[1]
    if new is None:
        raise StateError(f"ouro: lineage {summary.name} has no seed commit to compare")
    return diff_commits(repo.raw, commits[0], new, limits)
