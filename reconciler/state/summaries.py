"""Per-generation rows of a lineage, derived incrementally and cached. Read-only on lineages.

Rule: a lineage's repositories are the state; this module only derives from
them. The derivation (one ``GenerationRow`` per generation commit, joined with
its observation) is cached in ``<state dir>/.summaries/`` so that ``status``,
``log``, ``export`` and ``view`` do not re-read every observation each time.
The cache is never trusted blindly:

- it is keyed by the lineage's places and branches (``cache_key``) and by the
  heads it was derived from: the lineage branch head and the observation
  branch head (their commit ids);
- it carries a sha256 digest of its own content and a MAC made with the state dir's
  secret (``reconciler.state.cachefile``), both checked on every load: a record that
  anyone who can write the folder could have made (no MAC, or a wrong one) is rebuilt;
- it is only extended when the cached lineage head is on the current
  first-parent history (and the newest cached generation's commit is the
  generation commit found there) and the cached observation head is an
  ancestor of the current one; anything else rebuilds from scratch.

A missing, unreadable, corrupt or stale cache is rebuilt; a cache that cannot
be written is simply not written. Deleting ``.summaries/`` loses nothing.

Unknown is ``None`` (a field an observation lacks, or one written by another
instrument), never a guess. Fields other helpers add to observations
(``provider_failure``, stop reasons, kernel identity) are read tolerantly.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal, InvalidOperation
from functools import cached_property
from operator import attrgetter
from pathlib import Path
from typing import Any

import pygit2

from reconciler.errors import StateError
from reconciler.kernel.base import formats
from reconciler.kernel.base import totals as running
from reconciler.kernel.base.config import JOURNAL_FILE, ORGANISM_FILE, LineagePaths
from reconciler.ownfiles import read_regular
from reconciler.state.cachefile import (
    CACHE_DIR,
    MAC_FIELD,
    CacheSeal,
    cache_key,
    cache_seal,
    canonical,
    write_cache,
)
from reconciler.state.ran_with import kernel_run
from reconciler.state.repos import (
    READ_ERRORS,
    NewestUnreadable,
    Repo,
    Unreadable,
    first_line,
    observation_name,
    open_repo,
)

__all__ = [
    "CACHE_DIR",
    "COLUMNS",
    "SUMMARY_SCHEMA",
    "GenerationRow",
    "LineageSummary",
    "Totals",
    "cache_key",
    "heads",
    "summarize",
    "totals",
    "totals_of",
]

SUMMARY_SCHEMA = "ouro-lineage-summary/v3"


@dataclass(frozen=True)
class GenerationRow:
    """One generation, as ``ouro log`` and ``ouro export`` show it (docs/export.md).

    The field order is the export's column order; names are stable.
    """

    generation: int
    status: str | None  # changed | no-change | died (from the commit subject)
    outcome: str | None  # the observation's outcome text
    death_cause: str | None  # process_exit, signal, wall_timeout, cgroup_oom, decoder_rejection
    exit_status: int | None
    model_failure: str | None  # why the model gave nothing (an error code), None if it did
    organism_bytes: int | None
    organism_added: int | None
    organism_deleted: int | None
    paths_changed: int | None
    model_calls: int | None
    tokens_in: int | None
    tokens_out: int | None
    spend_usd: str | None  # decimal text
    cpu_seconds: float | None
    memory_peak_bytes: int | None
    wall_seconds: float | None
    started_at: str | None
    external_edits_before: int  # `external edit` / hand commits since the previous generation
    provider: str | None
    model: str | None
    lineage_commit: str
    observed: bool  # an observation of this generation was found
    # added in v3 (docs/export.md: columns are only ever added at the end)
    kernel_commit: str | None = None  # ran_with's kernel commit (None: not recorded)
    kernel_fingerprint: str | None = None
    ran_with: str | None = None  # recorded | not-recorded | malformed (None: no observation)
    truncated_calls: int | None = None  # model calls whose reply was cut off
    stops_lineage: bool | None = None  # its provider_failure is final (stops the lineage)
    usage_exceeds_request: bool | None = None  # the observation flags impossible usage


COLUMNS: tuple[str, ...] = tuple(item.name for item in fields(GenerationRow))
_POSITIONAL = attrgetter(*COLUMNS)  # a row's values, in COLUMNS order (the cache's rows)


@dataclass(frozen=True)
class LineageSummary:
    """A lineage's table of generations and its totals."""

    name: str
    rows: tuple[GenerationRow, ...]
    lineage_head: str | None
    observation_head: str | None
    interrupted_usd: str
    journal_heading: str | None
    trailing_edits: int  # non-generation commits after the newest generation
    problems: tuple[str, ...] = ()
    from_cache: bool = False
    sized: bool = True  # organism sizes were derived (status alone skips them)

    @property
    def generations(self) -> int:
        return len(self.rows)

    @cached_property
    def _tally(self) -> tuple[dict[str, int], dict[str, int], Decimal, int]:
        """Outcomes, death kinds, spend and model failures, in one pass over the rows
        (the rows are immutable: computed once per summary)."""
        counts = {"changed": 0, "no-change": 0, "died": 0}
        kinds: dict[str, int] = {}
        total = Decimal(self.interrupted_usd)
        failures = 0
        for row in self.rows:
            if row.status in counts:
                counts[row.status] += 1
            if row.death_cause is not None:
                kinds[row.death_cause] = kinds.get(row.death_cause, 0) + 1
            if row.spend_usd is not None:
                total += Decimal(row.spend_usd)
            if row.model_failure is not None:
                failures += 1
        return counts, dict(sorted(kinds.items())), total, failures

    @property
    def outcomes(self) -> dict[str, int]:
        return dict(self._tally[0])

    @property
    def death_kinds(self) -> dict[str, int]:
        return dict(self._tally[1])

    @property
    def spend_usd(self) -> Decimal:
        """Every generation's accounted spend plus that of discarded attempts."""
        return self._tally[2]

    @property
    def model_failures(self) -> int:
        return self._tally[3]

    def row(self, generation: int) -> GenerationRow | None:
        if 1 <= generation <= len(self.rows):
            return self.rows[generation - 1]
        return None


# ---------------------------------------------------------------- reading one generation


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _tokens(calls: Sequence[Any], key: str) -> int | None:
    total: int | None = None
    for call in calls:
        usage = call.get("usage") if isinstance(call, dict) else None
        value = _int(usage.get(key)) if isinstance(usage, dict) else None
        if value is not None:
            total = (total or 0) + value
    return total


_UNOBSERVED: dict[str, Any] = {
    "outcome": None, "death_cause": None, "exit_status": None, "model_failure": None,
    "model_calls": None, "tokens_in": None, "tokens_out": None, "spend_usd": None,
    "cpu_seconds": None, "memory_peak_bytes": None, "wall_seconds": None,
    "started_at": None, "provider": None, "model": None, "observed": False,
    "kernel_commit": None, "kernel_fingerprint": None, "ran_with": None,
    "truncated_calls": None, "stops_lineage": None, "usage_exceeds_request": None,
}


def _observation_fields(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """A row's observation part (every key of ``_UNOBSERVED``)."""
    if record is None:
        return dict(_UNOBSERVED)
    calls = record.get("model_calls")
    calls = calls if isinstance(calls, list) else []
    outcome = _str(record.get("outcome"))
    cpu = _int(record.get("cpu_usage_nsec"))
    wall = _int(record.get("duration_ms"))
    run = kernel_run(record)
    failure = record.get("provider_failure")
    return {
        "outcome": outcome,
        "death_cause": running.death_kind(outcome),
        "exit_status": _int(record.get("exit_status")),
        "model_failure": running.model_failure(record),
        "model_calls": len(calls),
        "tokens_in": _tokens(calls, "input_tokens"),
        "tokens_out": _tokens(calls, "output_tokens"),
        "spend_usd": str(formats.calls_spend(calls)),
        "cpu_seconds": cpu / 1e9 if cpu is not None else None,
        "memory_peak_bytes": _int(record.get("memory_peak_bytes")),
        "wall_seconds": wall / 1000 if wall is not None else None,
        "started_at": _str(record.get("started_at")),
        "provider": _str(record.get("provider")),
        "model": _str(record.get("model")),
        "observed": True,
        "kernel_commit": run.commit, "kernel_fingerprint": run.fingerprint,
        "ran_with": run.status,
        "truncated_calls": sum(1 for call in calls
                               if isinstance(call, dict) and call.get("truncated") is True),
        "stops_lineage": (failure.get("stops_lineage") is True
                          if isinstance(failure, dict) else False),
        "usage_exceeds_request": record.get("usage_exceeds_request") is True,
    }


def _diffstat(subject: str) -> tuple[int | None, int | None, int | None]:
    """(organism added, deleted, paths) from a ``gen N: changed (...)`` subject."""
    inner = subject.partition("(")[2].rpartition(")")[0]
    if subject.split(": ", 1)[-1].startswith("no-change"):
        return 0, 0, 0
    if not subject.split(": ", 1)[-1].startswith("changed"):
        return None, None, None
    body, _, tail = inner.partition("; ")
    paths = _leading_int(tail)
    if body == "organism unchanged":
        return 0, 0, paths
    plus, _, minus = body.removeprefix("organism ").partition("/")
    return _leading_int(plus.removeprefix("+")), _leading_int(minus.removeprefix("-")), paths


def _leading_int(text: str) -> int | None:
    digits = text.split(" ", 1)[0]
    return int(digits) if digits.isdigit() else None


def _organism_bytes(repo: Repo, commit: pygit2.Commit) -> int | None:
    try:
        entry = commit.tree[ORGANISM_FILE]
        kind, size = repo.raw.odb.read_header(entry.id)
    except (KeyError, pygit2.GitError, ValueError):
        return None
    return int(size) if kind == pygit2.enums.ObjectType.BLOB else None


def _size(repo: Repo, commit: pygit2.Commit, added: int | None,
          deleted: int | None, edits_before: int, previous: GenerationRow | None) -> int | None:
    """organism.el's size at a generation's commit. Read from the tree only when it may
    have changed: a generation that changed nothing of it, right after the previous
    generation (no commit between), has the previous generation's size."""
    unchanged = (added == 0 and deleted == 0 and previous is not None and not edits_before
                 and bool(commit.parent_ids)
                 and str(commit.parent_ids[0]) == previous.lineage_commit)
    if unchanged and previous is not None:
        return previous.organism_bytes
    return _organism_bytes(repo, commit)


def _commit_row(repo: Repo, commit: pygit2.Commit, subject: str, number: int,
                edits_before: int, previous: GenerationRow | None, sized: bool,
                record: Mapping[str, Any] | None = None) -> GenerationRow:
    """A generation's row, built once: the commit's part (``subject`` is its first line),
    joined with its observation ``record`` (when found), and the organism's size only
    when ``sized``."""
    parsed = formats.parse_generation_subject(subject)
    added, deleted, paths = _diffstat(subject)
    observed = _observation_fields(record) if record is not None else _UNOBSERVED
    size = _size(repo, commit, added, deleted, edits_before, previous) if sized else None
    return GenerationRow(
        generation=number, status=parsed.status if parsed else None,
        organism_bytes=size, organism_added=added, organism_deleted=deleted,
        paths_changed=paths, external_edits_before=edits_before,
        lineage_commit=str(commit.id), **observed,
    )


def _with_sizes(repo: Repo, rows: Sequence[GenerationRow]) -> list[GenerationRow]:
    """Rows derived without sizes (for status), given their organism sizes."""
    sized: list[GenerationRow] = []
    for row in rows:
        commit = repo.commit(row.lineage_commit)
        if commit is None:
            raise Unreadable(f"{repo.place}: commit {row.lineage_commit} is missing")
        size = _size(repo, commit, row.organism_added, row.organism_deleted,
                     row.external_edits_before, sized[-1] if sized else None)
        sized.append(replace(row, organism_bytes=size))
    return sized


# ---------------------------------------------------------------- repositories


def _observation(repo: Repo, folder: Mapping[str, pygit2.Oid],
                 number: int, problems: list[str]) -> dict[str, Any] | None:
    name = observation_name(number)
    if name not in folder:
        return None
    try:
        record = repo.json_of(folder[name], name)
    except StateError:
        problems.append(f"{formats.GENERATIONS_DIR}/{name} is unreadable")
        return None
    return record if isinstance(record, dict) else None


def _interrupted_usd(repo: Repo, tree: pygit2.Tree, problems: list[str]) -> Decimal:
    folder = repo.tree(tree, formats.INTERRUPTED_DIR)
    total = Decimal(0)
    for entry in folder if folder is not None else []:
        try:
            record = repo.json_of(entry.id, str(entry.name))
        except StateError:
            problems.append(f"{formats.INTERRUPTED_DIR}/{entry.name} is unreadable")
            continue
        if isinstance(record, dict):
            total += formats.calls_spend(record.get("model_calls"))
    return total


def _journal_heading(repo: Repo, commit: pygit2.Commit) -> str | None:
    try:
        blob = repo.raw.get(commit.tree[JOURNAL_FILE].id)
    except KeyError:
        return None
    if not isinstance(blob, pygit2.Blob):
        return None
    return formats.last_heading_line(bytes(blob.data).decode("utf-8", errors="replace"))


# ---------------------------------------------------------------- the cache


def _digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(body)).hexdigest()


# A summary cache past this is neither written nor read (``read_regular``): a lineage of
# 100,000 generations holds some 30 MB of rows; a planted larger file is rebuilt from.
MAX_CACHE_BYTES = 64 << 20
_HEADER_BYTES = 1 << 20  # its header line is shorter than this


def _cache_file(cache_dir: Path, paths: LineagePaths) -> Path:
    return cache_dir / f"{(paths.name or 'lineage')[:40]}-{cache_key(paths)}.json"


@dataclass(frozen=True)
class Totals:
    """What ``ouro status`` shows of a lineage: read from the cache's first line alone."""

    generations: int
    outcomes: dict[str, int]
    death_kinds: dict[str, int]
    model_failures: int
    spend_usd: Decimal
    journal_heading: str | None
    lineage_head: str | None
    observation_head: str | None
    problems: tuple[str, ...] = ()


def totals_of(summary: LineageSummary) -> Totals:
    return Totals(summary.generations, summary.outcomes, summary.death_kinds,
                  summary.model_failures, summary.spend_usd, summary.journal_heading,
                  summary.lineage_head, summary.observation_head, summary.problems)


# The cache file is two JSON lines: a small header (totals, heads, the digest of the
# rows line) whose own digest and MAC it carries, then the rows, positional in COLUMNS order.
# Status reads only the header; log, export and view read both.


def _header_of(totals: Totals, key: str, seal: CacheSeal, *, rows_sha256: str | None,
               interrupted_usd: str | None = None, trailing_edits: int | None = None,
               last_commit: str | None = None, sized: bool = False) -> dict[str, Any]:
    """The sealed header. ``rows_sha256`` None: a header without rows (the totals the
    kernel recorded, nothing derived), which status reads and ``_load_cache`` never takes
    for a summary (no rows line has a digest of None), so log, export and view derive."""
    header: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA, "key": key, "columns": list(COLUMNS),
        "lineage_head": totals.lineage_head, "observation_head": totals.observation_head,
        "interrupted_usd": interrupted_usd, "journal_heading": totals.journal_heading,
        "trailing_edits": trailing_edits, "generations": totals.generations,
        "outcomes": totals.outcomes, "death_kinds": totals.death_kinds,
        "model_failures": totals.model_failures, "spend_usd": str(totals.spend_usd),
        "last_commit": last_commit, "rows_sha256": rows_sha256, "sized": sized,
    }
    header["sha256"] = _digest(header)
    return seal.sealed(header)


def _header(line: bytes, paths: LineagePaths, seal: CacheSeal) -> dict[str, Any] | None:
    try:
        header = json.loads(line)
        if not isinstance(header, dict) or not seal.opens(header):
            return None
        del header[MAC_FIELD]
        digest = header.pop("sha256", None)
        if (header.get("schema") != SUMMARY_SCHEMA or header.get("key") != cache_key(paths)
                or header.get("columns") != list(COLUMNS) or digest != _digest(header)):
            return None
        return header
    except (ValueError, TypeError):
        return None


def _load_totals(cache_dir: Path | None, paths: LineagePaths) -> Totals | None:
    """The cached totals if the header is intact (schema, key, columns, digest)."""
    seal = None if cache_dir is None else cache_seal(cache_dir, create=False)
    if cache_dir is None or seal is None:
        return None
    try:
        data = read_regular(_cache_file(cache_dir, paths), MAX_CACHE_BYTES,
                            head=_HEADER_BYTES, own_folder=True)
        header = _header((data or b"").partition(b"\n")[0], paths, seal)
        if header is None:
            return None
        return Totals(
            generations=int(header["generations"]), outcomes=dict(header["outcomes"]),
            death_kinds=dict(header["death_kinds"]), model_failures=int(header["model_failures"]),
            spend_usd=Decimal(header["spend_usd"]), journal_heading=header["journal_heading"],
            lineage_head=header["lineage_head"], observation_head=header["observation_head"],
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, InvalidOperation):
        return None


def _load_cache(cache_dir: Path | None, paths: LineagePaths) -> LineageSummary | None:
    """The cached summary if it is intact: header as above, the rows line's digest, and
    rows numbered 1..N."""
    seal = None if cache_dir is None else cache_seal(cache_dir, create=False)
    if cache_dir is None or seal is None:
        return None
    try:
        data = read_regular(_cache_file(cache_dir, paths), MAX_CACHE_BYTES, own_folder=True)
        line, _, body = (data or b"").partition(b"\n")
        header = _header(line, paths, seal)
        if header is None or hashlib.sha256(body).hexdigest() != header["rows_sha256"]:
            return None
        rows = tuple(GenerationRow(*row) for row in json.loads(body))
        if [row.generation for row in rows] != list(range(1, len(rows) + 1)):
            return None
        Decimal(header["interrupted_usd"])
        return LineageSummary(
            name=paths.name, rows=rows, lineage_head=header["lineage_head"],
            observation_head=header["observation_head"],
            interrupted_usd=str(header["interrupted_usd"]),
            journal_heading=header["journal_heading"],
            trailing_edits=int(header["trailing_edits"]), from_cache=True,
            sized=header["sized"] is True,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, InvalidOperation):
        return None


def _store_cache(cache_dir: Path | None, paths: LineagePaths, summary: LineageSummary) -> None:
    """Write atomically (temp file, rename); a cache that cannot be written is skipped."""
    if cache_dir is None or summary.problems:
        return
    seal = cache_seal(cache_dir, create=True)
    if seal is None:
        return
    rows = json.dumps([_POSITIONAL(row) for row in summary.rows],
                      separators=(",", ":"), ensure_ascii=True).encode("ascii")
    header = _header_of(
        totals_of(summary), cache_key(paths), seal,
        rows_sha256=hashlib.sha256(rows).hexdigest(), interrupted_usd=summary.interrupted_usd,
        trailing_edits=summary.trailing_edits, sized=summary.sized,
        last_commit=summary.rows[-1].lineage_commit if summary.rows else None)
    if len(rows) > MAX_CACHE_BYTES - _HEADER_BYTES:
        return  # never read back: not written
    write_cache(_cache_file(cache_dir, paths),
                json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
                + b"\n" + rows)


def _store_totals(cache_dir: Path | None, paths: LineagePaths, totals: Totals) -> None:
    """The recorded totals as a header without rows: the next status reads one small file."""
    seal = None if cache_dir is None else cache_seal(cache_dir, create=True)
    if cache_dir is None or seal is None:
        return
    header = _header_of(totals, cache_key(paths), seal, rows_sha256=None)
    write_cache(_cache_file(cache_dir, paths),
                json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii"))


# ---------------------------------------------------------------- derivation


@dataclass
class _Walk:
    """What walking the lineage's first-parent history back to a known point found."""

    new: list[pygit2.Commit] = field(default_factory=list)  # oldest first, generation commits
    subjects: list[str] = field(default_factory=list)  # their first lines
    edits: list[int] = field(default_factory=list)  # non-generation commits before each
    trailing: int = 0
    resumed: bool = False


def _walk(repo: Repo, head: pygit2.Commit,
          cached: LineageSummary | None) -> _Walk:
    """Generation commits after the cached head (all of them if the cache does not apply)."""
    stop = cached.lineage_head if cached is not None else None
    newest_first: list[pygit2.Commit] = []
    subjects: list[str] = []
    between: list[int] = []  # non-generation commits after each newest-first commit
    pending = 0
    resumed = False
    for commit in repo.first_parents(head):
        if stop is not None and str(commit.id) == stop:
            resumed = True
            break
        subject = first_line(commit)
        if formats.is_generation_subject(subject):
            newest_first.append(commit)
            subjects.append(subject)
            between.append(pending)
            pending = 0
        elif commit.parent_ids:  # not the root
            pending += 1
    walk = _Walk(resumed=resumed)
    walk.new = newest_first[::-1]
    walk.subjects = subjects[::-1]
    # between[i] counts commits after newest_first[i]; the edits before commit i (oldest
    # first) are those after commit i-1, and before the first: the `pending` ones.
    after = between[::-1]
    carried = cached.trailing_edits if resumed and cached is not None else 0
    before_first = pending + carried
    walk.edits = [before_first, *after[:-1]] if walk.new else []
    walk.trailing = after[-1] if walk.new else before_first
    return walk


def _resumable(repo: Repo, cached: LineageSummary, walk: _Walk,
               obs_repo: Repo | None, obs_head: pygit2.Commit | None) -> bool:
    """The cache is a prefix of today's history: check the newest cached generation's
    commit is the generation commit at or before the cached head, and the cached
    observation head is an ancestor of today's."""
    if not walk.resumed or cached.lineage_head is None:
        return False
    if cached.rows:
        start = repo.commit(cached.lineage_head)
        if start is None:
            return False
        newest = next((commit for commit in repo.first_parents(start)
                       if formats.is_generation_subject(first_line(commit))), None)
        if newest is None or str(newest.id) != cached.rows[-1].lineage_commit:
            return False
    if cached.observation_head is None or obs_head is None or obs_repo is None:
        return cached.observation_head is None and obs_head is None
    if cached.observation_head == str(obs_head.id):
        return True
    try:
        return bool(obs_repo.raw.descendant_of(obs_head.id,
                                               pygit2.Oid(hex=cached.observation_head)))
    except READ_ERRORS:
        return False


def heads(paths: LineagePaths) -> tuple[str | None, str | None]:
    """The lineage branch head and the observation branch head (commit ids), cheaply: from
    the refs alone, so that no object is read (``_summarize`` checks before it reads)."""
    return _head_ids(open_repo(paths.git_dir, bare=True), open_repo(paths.observations), paths)


def _head_ids(repo: Repo | None, obs_repo: Repo | None,
              paths: LineagePaths) -> tuple[str | None, str | None]:
    ids = (repo.head_id(paths.branch) if repo is not None else None,
           obs_repo.head_id(paths.observation_branch) if obs_repo is not None else None)
    return (str(ids[0]) if ids[0] is not None else None,
            str(ids[1]) if ids[1] is not None else None)


def totals(paths: LineagePaths, cache_dir: Path | None = None, *,
           whole: tuple[str | None, str | None] = (None, None)) -> Totals:
    """The lineage's totals: the cache's header when its heads are today's (the rows
    are not read), else those the kernel recorded in the newest observation
    (``_recorded_totals``), else from ``summarize`` (which extends or rebuilds the cache).
    ``whole``: the heads observe has just read and found whole: today's heads (the refs
    are not read again, nor those objects checked again)."""
    cached = _load_totals(cache_dir, paths)
    now = whole if any(whole) else heads(paths)
    if cached is not None and (cached.lineage_head, cached.observation_head) == now:
        return cached
    recorded = _recorded_totals(paths, whole)
    if recorded is not None:
        _store_totals(cache_dir, paths, recorded)
        return recorded
    return totals_of(_guarded(paths, cache_dir, sized=False, whole=whole))


_NOT_READ: tuple[type[BaseException], ...] = (StateError, *READ_ERRORS)


def _recorded_totals(paths: LineagePaths,
                     whole: tuple[str | None, str | None]) -> Totals | None:
    """The totals the kernel recorded (physics release 4: ``running_totals`` in each
    observation), read from the newest generation's observation alone, or None for the
    whole derivation to decide. Believed only when that observation names the newest
    generation commit of today's first-parent history (a commit id fixes the history
    below it, so the record's count is today's) and its totals count exactly that many
    generations; a lineage born before release 4, another instrument's, or one whose
    records do not read or agree, is derived from every record as before. Discarded
    attempts' spend (``interrupted/``) is added, as the derivation adds it."""
    try:
        repo = open_repo(paths.git_dir, bare=True)
        obs_repo = open_repo(paths.observations)
        head = repo.head(paths.branch, whole=whole[0]) if repo is not None else None
        obs_head = (obs_repo.head(paths.observation_branch, whole=whole[1])
                    if obs_repo is not None else None)
        if repo is None or obs_repo is None or head is None or obs_head is None:
            return None
        newest = next((commit for commit in repo.first_parents(head)
                       if formats.is_generation_subject(first_line(commit))), None)
        parsed = formats.parse_generation_subject(first_line(newest)) if newest else None
        if newest is None or parsed is None:
            return None
        record = obs_repo.json_or_none(obs_head.tree, formats.observation_path(parsed.number))
        if not isinstance(record, dict) or record.get("lineage_commit") != str(newest.id):
            return None
        recorded = running.from_json(record.get(running.TOTALS_KEY))
        problems: list[str] = []
        interrupted = _interrupted_usd(obs_repo, obs_head.tree, problems)
        if recorded is None or recorded.generations != parsed.number or problems:
            return None
        return Totals(
            generations=recorded.generations, outcomes=dict(recorded.outcomes),
            death_kinds=dict(recorded.death_kinds), model_failures=recorded.model_failures,
            spend_usd=recorded.spend_usd + interrupted,
            journal_heading=_journal_heading(repo, head),
            lineage_head=str(head.id), observation_head=str(obs_head.id))
    except _NOT_READ:  # the derivation names what does not read
        return None


def summarize(paths: LineagePaths, cache_dir: Path | None = None) -> LineageSummary:
    """The lineage's rows and totals: from the cache when its heads are today's, extended
    incrementally when today's history continues it, rebuilt otherwise. Never raises for
    a damaged lineage: what cannot be read becomes a problem (and is not cached)."""
    return _guarded(paths, cache_dir, sized=True)


def _guarded(paths: LineagePaths, cache_dir: Path | None, *, sized: bool,
             whole: tuple[str | None, str | None] = (None, None)) -> LineageSummary:
    try:
        return _summarize(paths, cache_dir, sized, whole)
    except NewestUnreadable as error:
        return LineageSummary(
            name=paths.name, rows=(), lineage_head=None, observation_head=None,
            interrupted_usd="0", journal_heading=None, trailing_edits=0,
            problems=(f"lineage {paths.label}: its repositories cannot be read: {error}",))
    except READ_ERRORS as error:
        return LineageSummary(
            name=paths.name, rows=(), lineage_head=None, observation_head=None,
            interrupted_usd="0", journal_heading=None, trailing_edits=0,
            problems=(f"lineage {paths.label}: its repositories cannot be read "
                      f"({type(error).__name__}: {error})",),
        )


def _summarize(paths: LineagePaths, cache_dir: Path | None, sized: bool,
               whole: tuple[str | None, str | None]) -> LineageSummary:
    """See ``summarize``. ``sized``: derive organism sizes (status does not need them;
    a cache without them is completed, not rebuilt, when rows are asked for).
    ``whole``: the heads observe just found whole (``Repo.head`` checks any other)."""
    repo = open_repo(paths.git_dir, bare=True)
    obs_repo = open_repo(paths.observations)
    cached = _load_cache(cache_dir, paths)
    if cached is not None and (cached.sized or not sized) and (
            cached.lineage_head, cached.observation_head) == _head_ids(repo, obs_repo, paths):
        return cached  # nothing read but the refs and the cache
    # objects are read from here on: Repo.head checks what the newest commits added
    head = repo.head(paths.branch, whole=whole[0]) if repo is not None else None
    obs_head = obs_repo.head(paths.observation_branch, whole=whole[1]) if obs_repo else None
    heads = (str(head.id) if head else None, str(obs_head.id) if obs_head else None)
    if repo is None or head is None:
        if not os.path.lexists(paths.git_dir):
            return LineageSummary(paths.name, (), None, heads[1], "0", None, 0)
        what = ("is not a readable git repository" if repo is None
                else f"has no readable branch {paths.branch!r}")
        return LineageSummary(paths.name, (), None, heads[1], "0", None, 0, problems=(
            f"lineage {paths.name}: its repositories cannot be read ({paths.git_dir} {what}); "
            "run `ouro verify` or `git fsck` on it",))
    problems: list[str] = []
    walk = _walk(repo, head, cached)
    base: list[GenerationRow] = []
    if cached is not None and _resumable(repo, cached, walk, obs_repo, obs_head):
        base = list(cached.rows)
        sized = sized or cached.sized  # a sized cache stays sized
        if sized and not cached.sized:
            base = _with_sizes(repo, base)
    elif walk.resumed:  # the cache does not continue into today's history: start over
        walk = _walk(repo, head, None)
    interrupted = Decimal(0)
    folder: dict[str, pygit2.Oid] = {}
    if obs_repo is not None and obs_head is not None:
        tree = obs_repo.tree(obs_head.tree, formats.GENERATIONS_DIR)
        folder = {str(entry.name): entry.id for entry in tree} if tree is not None else {}
        for index, row in enumerate(base):  # observations are append-only (the cached
            if not row.observed:            # head is an ancestor): only the missing ones
                record = _observation(obs_repo, folder, row.generation, problems)
                if record is not None:
                    base[index] = replace(row, **_observation_fields(record))
    rows = base
    for commit, subject, edits in zip(walk.new, walk.subjects, walk.edits, strict=True):
        number = len(rows) + 1
        record = (_observation(obs_repo, folder, number, problems)
                  if obs_repo is not None else None)
        rows.append(_commit_row(repo, commit, subject, number, edits,
                                rows[-1] if rows else None, sized, record))
    if obs_repo is not None and obs_head is not None:
        interrupted = _interrupted_usd(obs_repo, obs_head.tree, problems)
    journal = (cached.journal_heading if cached is not None and heads[0] == cached.lineage_head
               else _journal_heading(repo, head))
    summary = LineageSummary(
        name=paths.name, rows=tuple(rows), lineage_head=heads[0], observation_head=heads[1],
        interrupted_usd=str(interrupted), journal_heading=journal,
        trailing_edits=walk.trailing, problems=tuple(problems), sized=sized,
    )
    _store_cache(cache_dir, paths, summary)
    return summary
