"""The full-history audit of one lineage: pure reading of both repositories.

Rule: this module only reads (pygit2, never a write, never a `git` process) and
never needs a spec: per-generation budgets come from each observation's recorded
constraints. It is O(history) and meant to run OFF the critical path, in its own
interpreter (``reconciler.state.audit_child``, supervised by ``reconciler.engine.verify``).

Unknown is not guilty: a history that cannot be read yields ``unknown`` with no
findings, never an accusation. A finding names a stable code (``CODES``), the
lineage and, where one applies, a generation number: no paths, no messages.

The audit reads each object once: every version of the journal and of the
observations' folder is checked against the newest one by hashing prefixes
(``_Prefixes``), never by reading and diffing it (that was quadratic); only a
version that is not a prefix is read and diffed. The hashing still covers the
sum of all versions' sizes, the one term that grows faster than history (a few
percent of the audit at 1,000 generations).

An audit may resume (``since``, a ``Resume``): an earlier audit found both
histories consistent up to two heads and read every object reachable from them
(``reconciler.state.audit_record`` keeps that verdict and decides whether it
still holds). The resumed audit checks only the commits, objects and
observations that came after those heads, and re-checks everything global (the
root, both metadata files, the journal's headings, which generations have
observations); every per-generation check of the earlier part is a statement
about immutable objects that the earlier audit already made. When today's
histories do not continue the recorded heads, the audit starts over in full.

The restored body after a death (``restored_organism``) is the kernel's rule,
``kernel.publish.restore_source``: on a death whose parent is P, organism.el
becomes the body of P's nearest first-parent ancestor whose organism.el exists and
differs from P's (the original instrument's ``git rev-list -n 2 P -- organism.el``,
which agrees wherever organism.el never went missing); with none, P's body stays.

Running totals (physics release 4, ``kernel.base.totals``) are the kernel's rule too:
an observation N that records ``running_totals`` must record exactly
``to_json(advance(before, N))``, where ``before`` is observation N-1's totals when
they read (``from_json``) and count N-1 generations, else the fold of ``advance``
over observations 1..N-1 (a missing or invalid one counts as ``{}``: the audit reads
nothing from an invalid record). A record without the key (before release 4) is
not checked. A resumed audit reads the one earlier record N-1 it needs for its
first new generation, all of them only when that record's totals do not read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

import pygit2

from reconciler.kernel.base import formats, totals
from reconciler.kernel.base.config import (
    GENERATION_SCHEMA,
    JOURNAL_FILE,
    LINEAGE_SCHEMA,
    METADATA_FILE,
    OBSERVATIONS_SCHEMA,
    ORGANISM_FILE,
    LineagePaths,
)
from reconciler.kernel.base.identity import OBJECT_ID
from reconciler.kernel.transaction import publish
from reconciler.state.audit_objects import (
    ObjectStore,
    readable,
    unreadable_reachable,
    unreadable_since,
)
from reconciler.state.forks import check_ancestry
from reconciler.state.probe_rules import RULES
from reconciler.state.probes import check_records
from reconciler.state.repos import open_repo

__all__ = [
    "CODES",
    "IDENTIFIER",
    "Finding",
    "HistoryUnreadable",
    "LineageAudit",
    "Resume",
    "accounted_spend",
    "audit_lineage",
    "exception_class_name",
    "observation_valid",
    "restored_organism",
]

Status = Literal["consistent", "findings", "unknown"]

# Every finding code, with the rule it protects (the human text of `ouro verify`).
CODES: Mapping[str, str] = {
    "lineage-metadata-missing": "the root has no .ouroboros-lineage.json (predates the instrument)",
    "lineage-metadata-invalid": "the lineage metadata is not a valid ouroboros-lineage/v2 record",
    "root-subject": "the root commit's subject is not `seed`",
    "seed-mismatch": "seed_sha256 does not match organism.el in the root commit",
    "observations-missing": "the observation repository or its branch is missing",
    "observation-metadata-missing": "the observation branch has no metadata.json",
    "observation-metadata-invalid": "the observation metadata is not ouroboros-observations/v1",
    "observation-branch-mismatch": "the observation metadata names other branches than audited",
    "metadata-disagree": "lineage and observation metadata disagree (instrument or seed)",
    "generation-number": "a generation commit's number is not its first-parent count",
    "generation-subject": "a `gen ` commit subject has no recognised status",
    "journal-entry-missing": "a generation commit does not append its own journal heading",
    "journal-status-mismatch": "a journal heading's status differs from its generation commit's",
    "journal-not-append": "a generation commit changes journal.md other than by appending",
    "journal-headings": "the journal's headings are not exactly gen 1..N in order",
    "metadata-changed": "a commit changes .ouroboros-lineage.json",
    "git-path-added": "a generation commit adds a path under a `.git` component",
    "death-kept-writes": "a death commit changes paths other than organism.el and journal.md",
    "restore-mismatch": "after a death, organism.el is not the restored body",
    "observation-missing": "a generation has no observation",
    "observation-duplicate": "a generation has more than one observation file",
    "observation-extra": "an observation names a generation that has no commit",
    "observation-commit-mismatch": "an observation's lineage_commit is not its generation's commit",
    "rewritten-history": "an observation's lineage_commit is not an ancestor of the branch head",
    "observation-status-mismatch": "an observation's outcome differs from its commit's status",
    "observation-invalid": "an observation's schema or field types are invalid",
    "observation-rewritten": "the observation history modifies or deletes a recorded file",
    "overspend": "a generation's accounted model spend exceeds its recorded budget",
    "running-totals-mismatch": "an observation's running_totals do not add up its lineage's "
                               "observations through it (physics release 4)",
    "probe-record-commit": "a probe record names another commit than its generation's",
    "probe-record-digest": "a probe record's digest is not its probe's (argv, files, ceilings)",
    "probe-record-invalid": "a probe record is not a JSON object",
    **{f"probe-record-{rule}": text for rule, text in RULES.items()},
    "fork-parent-commit": "a fork's recorded commit is not that generation of its parent",
    "fork-seed-mismatch": "a fork's seed is not its parent's generation tree (docs/contract.md)",
    "fork-record-disagrees": "a fork's two metadata files record different ancestries",
    "object-unreadable": "an object reachable from a branch is missing or corrupt (git fsck "
                         "names it): restore it from a clone or a backup",
}

_HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")
_OBJECT_ID = OBJECT_ID
_INSTRUMENT_KEYS = formats.INSTRUMENT_KEYS
_DEATH_MAY_CHANGE = frozenset({ORGANISM_FILE, JOURNAL_FILE})
_HASH_THREADS = 2


@dataclass(frozen=True)
class Finding:
    code: str
    lineage: str
    generation: int | None = None

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"audit: unknown finding code {self.code!r}")


@dataclass(frozen=True)
class LineageAudit:
    """What the audit concluded about one lineage."""

    lineage: str
    status: Status
    generations: int = 0
    observations: int = 0
    commits: int = 0
    findings: tuple[Finding, ...] = ()
    duration_ms: int = 0
    exception_class: str | None = None


    resumed: int = 0  # generations an earlier clean audit had checked (0: a full audit)
    lineage_head: str | None = None  # the heads this audit checked (None: unknown)
    observation_head: str | None = None
    observation_commits: int = 0
    # a fork's link to its parent (state.forks): linked | parent-not-present | broken
    ancestry: str | None = None


@dataclass(frozen=True)
class Resume:
    """What an earlier clean audit proved: both first-parent histories are consistent up
    to these heads (the ``commits``-th commit of each) and every object reachable from
    them reads whole."""

    lineage_head: str
    lineage_commits: int
    generations: int
    observation_head: str
    observation_commits: int


class HistoryUnreadable(Exception):
    """The lineage's history cannot be read at all: the audit says `unknown`, never guilty."""


class _NotResumable(Exception):
    """Today's histories do not continue the earlier audit's heads: audit in full."""


# ---------------------------------------------------------------- small readers


def _subject(commit: pygit2.Commit) -> str:
    return str(commit.message).split("\n", 1)[0]


def _blob_id(tree: pygit2.Tree, name: str) -> pygit2.Oid | None:
    if name not in tree:
        return None
    entry = tree[name]
    return entry.id if entry.type_str == "blob" else None


def _tree_id(tree: pygit2.Tree, name: str) -> pygit2.Oid | None:
    if name not in tree:
        return None
    entry = tree[name]
    return entry.id if entry.type_str == "tree" else None


def _blob_bytes(repo: pygit2.Repository, oid: pygit2.Oid | None) -> bytes | None:
    if oid is None:
        return None
    blob = repo[oid]
    if not isinstance(blob, pygit2.Blob):
        raise HistoryUnreadable("not a blob")
    return bytes(blob.data)


def _strict_json(data: bytes) -> Any:
    """JSON as the instrument writes it: UTF-8, no NaN/Infinity. Raises ValueError."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"non-finite number {constant}")

    return json.loads(data.decode("utf-8"), parse_constant=refuse)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_money = formats.usd_amount


def _first_parent_chain(repo: pygit2.Repository, head: pygit2.Oid) -> list[pygit2.Commit]:
    """Root first. Each commit once; a cycle or a missing object is unreadable."""
    chain: list[pygit2.Commit] = []
    seen: set[pygit2.Oid] = set()
    oid: pygit2.Oid | None = head
    while oid is not None:
        if oid in seen:
            raise HistoryUnreadable("cycle")
        seen.add(oid)
        commit = repo[oid]
        if not isinstance(commit, pygit2.Commit):
            raise HistoryUnreadable("not a commit")
        chain.append(commit)
        oid = commit.parent_ids[0] if commit.parent_ids else None
    chain.reverse()
    return chain


def _resumed_at(chain: Sequence[pygit2.Commit], head: str, commits: int) -> int:
    """Where the audit resumes: the index after the earlier head, which must be the
    ``commits``-th commit of today's first-parent history."""
    if not 1 <= commits <= len(chain) or str(chain[commits - 1].id) != head:
        raise _NotResumable("the history does not continue the audited head")
    return commits


def _tree(repo: pygit2.Repository, oid: pygit2.Oid) -> pygit2.Tree:
    tree = repo[oid]
    if not isinstance(tree, pygit2.Tree):
        raise HistoryUnreadable("not a tree")
    return tree


def restored_organism(
    organisms: Sequence[pygit2.Oid | None], parent_index: int
) -> pygit2.Oid | None:
    """The organism.el a death whose parent is ``organisms[parent_index]`` must restore:
    the kernel's rule (``kernel.publish.restore_source``), on the organism.el blob id
    (or None) of every first-parent commit, root first."""
    current = organisms[parent_index]
    index = publish.restore_source(current, reversed(organisms[:parent_index]))
    return current if index is None else organisms[parent_index - 1 - index]


class _Prefixes:
    """Which versions of an append-only object are a prefix of its newest version.

    Reading every version of a growing file (the journal) or tree (the observations'
    ``generations/``) is quadratic in history. Instead, each version's size is read
    from its object header and the version is a prefix of the newest content when
    the git object id of that prefix is the version's id: equal ids, equal bytes.
    Hashing prefixes is cheap; when a version is not a prefix (``None``), the caller
    does the exact, slower check.
    """

    def __init__(self, repo: pygit2.Repository, kind: str, final: bytes,
                 final_id: pygit2.Oid | None = None) -> None:
        self.repo, self.kind, self.final = repo, kind, memoryview(final)
        self.final_id = final_id
        self.known: dict[pygit2.Oid, int | None] = {}

    def length(self, oid: pygit2.Oid | None) -> int | None:
        """The version's size if it is a prefix of the newest content (0 for no version)."""
        if oid is None:
            return 0
        if oid not in self.known:
            self.prepare([oid], threads=1)
        return self.known[oid]

    def prepare(self, oids: Iterable[pygit2.Oid | None], threads: int = _HASH_THREADS) -> None:
        """Measure many versions at once: the hashing runs on a few threads (hashlib
        releases the GIL), since it is the one cost here that grows faster than history."""
        sizes: dict[pygit2.Oid, int] = {}
        for oid in oids:
            if oid is None or oid in self.known or oid in sizes:
                continue
            try:
                _kind, size = self.repo.odb.read_header(oid)
            except (KeyError, ValueError, pygit2.GitError):
                self.known[oid] = None
                continue
            if size > len(self.final):
                self.known[oid] = None
            else:
                sizes[oid] = int(size)
        items = list(sizes.items())
        if threads <= 1 or len(items) < 2:
            for oid, size in items:
                self.known[oid] = size if self._same((oid, size)) else None
            return
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for (oid, size), same in zip(items, pool.map(self._same, items), strict=True):
                self.known[oid] = size if same else None

    def _same(self, item: tuple[pygit2.Oid, int]) -> bool:
        oid, size = item
        algorithm = hashlib.sha1 if len(str(oid)) == 40 else hashlib.sha256
        digest = algorithm(f"{self.kind} {size}\0".encode("ascii"), usedforsecurity=False)
        digest.update(self.final[:size])
        return digest.hexdigest() == str(oid)


# ---------------------------------------------------------------- validation


def _lineage_metadata_valid(metadata: Any) -> bool:
    if not isinstance(metadata, dict) or metadata.get("schema") != LINEAGE_SCHEMA:
        return False
    if not all(isinstance(metadata.get(key), str) for key in _INSTRUMENT_KEYS):
        return False
    return bool(
        _OBJECT_ID.match(metadata["instrument_commit"])
        and _HEX64.match(metadata["instrument_fingerprint"])
        and _HEX64.match(metadata["seed_sha256"])
    )


def _observation_metadata_valid(metadata: Any) -> bool:
    if not isinstance(metadata, dict) or metadata.get("schema") != OBSERVATIONS_SCHEMA:
        return False
    keys = ("lineage_branch", "observation_branch", *_INSTRUMENT_KEYS)
    return all(isinstance(metadata.get(key), str) for key in keys)


_OPTIONAL_COUNTS = (
    "duration_ms",
    "cpu_usage_nsec",
    "memory_peak_bytes",
    "oom_kills",
    "result_archive_bytes",
    "published_bytes",
    "published_files",
)


def _budget(record: Mapping[str, Any]) -> Decimal | None:
    constraints = record.get("constraints")
    model = constraints.get("model") if isinstance(constraints, dict) else None
    budget = model.get("spending_budget") if isinstance(model, dict) else None
    if not isinstance(budget, dict) or budget.get("currency") != "USD":
        return None
    return _money(budget.get("amount"))


def _call_valid(call: Any) -> bool:
    if not isinstance(call, dict):
        return False
    status = call.get("http_status")
    if status is not None and not _is_int(status):
        return False
    for key in ("reserved_usd", "accounted_usd"):
        if call.get(key) is not None and _money(call[key]) is None:
            return False
    return True


def observation_valid(record: Any, number: int) -> bool:
    """Schema and field types of one generation observation (docs/lineage-contract.md)."""
    if not isinstance(record, dict) or record.get("schema") != GENERATION_SCHEMA:
        return False
    if record.get("generation") != number or not _is_int(record.get("generation")):
        return False
    for key in ("started_at", "outcome", "lineage_commit"):
        if not isinstance(record.get(key), str):
            return False
    if formats.status_of_outcome(record["outcome"]) is None:
        return False
    if not _OBJECT_ID.match(record["lineage_commit"]):
        return False
    for key in _OPTIONAL_COUNTS:
        value = record.get(key)
        if value is not None and not (_is_int(value) and value >= 0):
            return False
    if record.get("exit_status") is not None and not _is_int(record["exit_status"]):
        return False
    for key in ("systemd_result", "provider", "model"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return False
    tail = record.get("stderr_tail")
    if tail is not None and not isinstance(tail, str) and not (
        isinstance(tail, list) and all(isinstance(line, str) for line in tail)
    ):
        return False
    calls = record.get("model_calls")
    if not isinstance(calls, list) or not all(_call_valid(call) for call in calls):
        return False
    return _budget(record) is not None


def _valid_record(raw: bytes | None, number: int) -> dict[str, Any] | None:
    """Observation ``number``'s record if it is valid, else None (nothing is read from it)."""
    if raw is None:
        return None
    try:
        record = _strict_json(raw)
    except ValueError:
        return None
    return record if observation_valid(record, number) else None


def accounted_spend(record: Mapping[str, Any]) -> Decimal:
    """The spend a generation's broker accounted (the kernel's one rule,
    ``formats.calls_spend``)."""
    return formats.calls_spend(record.get("model_calls"))


# ---------------------------------------------------------------- the audit


@dataclass
class _Audit:
    name: str
    paths: LineagePaths
    findings: list[Finding] = field(default_factory=list)
    folders: _Prefixes | None = None  # the observations' generations/ versions, shared
    generations: int = 0
    observations: int = 0
    commits: int = 0
    since: Resume | None = None
    lineage_head: str | None = None
    observation_head: str | None = None
    observation_commits: int = 0
    # when resumed: each generation's observation the earlier audit checked, unread
    unread: dict[int, Callable[[], bytes | None]] = field(default_factory=dict)

    def find(self, code: str, generation: int | None = None) -> None:
        self.findings.append(Finding(code, self.name, generation))

    def ancestry(self, places: Callable[[str], LineagePaths | None] | None) -> str | None:
        """A fork's link to its parent, checked on every audit (never resumed: it reads
        the parent, which no record of this lineage covers); None: not a fork."""
        try:
            found = check_ancestry(self.paths, places or (lambda name: None))
        except Exception:  # a parent that does not read is not judged (unknown: no guilt)
            return None
        if found is None:
            return None
        for code in found.findings:
            if code == "fork-parent-commit":
                self.find("fork-parent-commit")
            elif code == "fork-seed-mismatch":
                self.find("fork-seed-mismatch")
            else:
                self.find("fork-record-disagrees")
        return found.verdict

    # -- lineage repository -------------------------------------------------

    def lineage(self) -> tuple[pygit2.Repository, list[pygit2.Commit], dict[str, Any] | None]:
        if not self.paths.git_dir.exists():
            raise HistoryUnreadable("no lineage git dir")
        opened = open_repo(self.paths.git_dir)
        if opened is None:
            raise HistoryUnreadable("the lineage git dir is not a repository")
        repo, head = opened.raw, opened.head_id(self.paths.branch)
        if head is None:
            raise HistoryUnreadable("no lineage branch")
        chain = _first_parent_chain(repo, head)
        self.commits, self.lineage_head = len(chain), str(head)
        return repo, chain, self._root(repo, chain[0])

    def _root(self, repo: pygit2.Repository, root: pygit2.Commit) -> dict[str, Any] | None:
        if _subject(root) != formats.SEED_SUBJECT:
            self.find("root-subject")
        raw = _blob_bytes(repo, _blob_id(root.tree, METADATA_FILE))
        if raw is None:
            self.find("lineage-metadata-missing")
            return None
        try:
            metadata = _strict_json(raw)
        except ValueError:
            metadata = None
        if not _lineage_metadata_valid(metadata):
            self.find("lineage-metadata-invalid")
            return None
        assert isinstance(metadata, dict)
        organism = _blob_bytes(repo, _blob_id(root.tree, ORGANISM_FILE))
        if organism is None or hashlib.sha256(organism).hexdigest() != metadata["seed_sha256"]:
            self.find("seed-mismatch")
        return metadata

    def walk(
        self, repo: pygit2.Repository, chain: list[pygit2.Commit]
    ) -> dict[int, tuple[pygit2.Oid, str | None]]:
        """Every generation commit (after the resumed head), checked against its parent.
        Returns n -> (id, status) for every generation, the resumed ones included."""
        generations: dict[int, tuple[pygit2.Oid, str | None]] = {}
        organisms = [_blob_id(commit.tree, ORGANISM_FILE) for commit in chain]
        metadata = _blob_id(chain[0].tree, METADATA_FILE)
        start, count = 1, 0
        if self.since is not None:
            start = _resumed_at(chain, self.since.lineage_head, self.since.lineage_commits)
            for commit in chain[1:start]:  # numbered again, never re-checked
                if formats.is_generation_subject(_subject(commit)):
                    count += 1
                    parsed = formats.parse_generation_subject(_subject(commit))
                    generations[count] = (commit.id, parsed.status if parsed else None)
            if count != self.since.generations:
                raise _NotResumable("generation count")
        journals = _Prefixes(
            repo, "blob", _blob_bytes(repo, _blob_id(chain[-1].tree, JOURNAL_FILE)) or b"")
        journals.prepare(_blob_id(commit.tree, JOURNAL_FILE) for commit in chain[start - 1:])
        for index in range(start, len(chain)):
            commit, parent = chain[index], chain[index - 1]
            subject = _subject(commit)
            generation = formats.is_generation_subject(subject)
            if generation:
                count += 1
            number = count if generation else None
            if _blob_id(commit.tree, METADATA_FILE) != metadata:
                self.find("metadata-changed", number)
            if number is None:
                continue
            parsed = formats.parse_generation_subject(subject)
            if parsed is None or parsed.number != number:
                self.find("generation-number", number)
            status = parsed.status if parsed is not None else None
            if parsed is not None and status is None:
                self.find("generation-subject", number)
            generations[number] = (commit.id, status)
            self._journal_append(repo, parent, commit, number, status, journals)
            changed = self._changed_paths(parent, commit)
            if any(".git" in path.split("/") for path in changed):
                self.find("git-path-added", number)
            if status == "died":
                if not changed <= _DEATH_MAY_CHANGE:
                    self.find("death-kept-writes", number)
                if organisms[index] != restored_organism(organisms, index - 1):
                    self.find("restore-mismatch", number)
        self.generations = count
        return generations

    @staticmethod
    def _changed_paths(parent: pygit2.Commit, commit: pygit2.Commit) -> set[str]:
        paths: set[str] = set()
        for delta in parent.tree.diff_to_tree(commit.tree).deltas:
            paths.add(delta.new_file.path)
            paths.add(delta.old_file.path)
        return paths

    def _journal_append(
        self, repo: pygit2.Repository, parent: pygit2.Commit, commit: pygit2.Commit,
        number: int, status: str | None, journals: _Prefixes,
    ) -> None:
        before_id = _blob_id(parent.tree, JOURNAL_FILE)
        after_id = _blob_id(commit.tree, JOURNAL_FILE)
        start, end = journals.length(before_id), journals.length(after_id)
        if start is not None and end is not None and start <= end:
            appended = bytes(journals.final[start:end])  # both are prefixes of the newest
        else:  # the exact check, reading both versions
            before = _blob_bytes(repo, before_id) or b""
            after = _blob_bytes(repo, after_id) or b""
            if not after.startswith(before):
                self.find("journal-not-append", number)
                return
            appended = after[len(before):]
        added = formats.parse_journal(appended.decode("utf-8", errors="replace"))
        own = [heading for heading in added if heading.number == number]
        if len(added) != 1 or not own:
            self.find("journal-entry-missing", number)
        elif status is not None and own[0].status != status:
            self.find("journal-status-mismatch", number)

    def journal_headings(self, repo: pygit2.Repository, head: pygit2.Commit) -> None:
        text = (_blob_bytes(repo, _blob_id(head.tree, JOURNAL_FILE)) or b"").decode(
            "utf-8", errors="replace"
        )
        numbers = [heading.number for heading in formats.parse_journal(text)]
        expected = list(range(1, self.generations + 1))
        if numbers != expected:
            first = next(
                (want for got, want in zip(numbers, expected, strict=False) if got != want),
                min(len(numbers), len(expected)) + 1,
            )
            self.find("journal-headings", first)

    # -- observation repository ----------------------------------------------

    def observation_repo(self) -> tuple[pygit2.Repository, list[pygit2.Commit]] | None:
        if not self.paths.observations.exists():
            self.find("observations-missing")
            return None
        opened = open_repo(self.paths.observations)  # never a repository further up
        head = opened.head_id(self.paths.observation_branch) if opened is not None else None
        if opened is None or head is None:
            self.find("observations-missing")
            return None
        repo = opened.raw
        chain = _first_parent_chain(repo, head)
        if self.since is not None:
            _resumed_at(chain, self.since.observation_head, self.since.observation_commits)
        self.observation_head, self.observation_commits = str(head), len(chain)
        return repo, chain

    def observation_metadata(
        self, repo: pygit2.Repository, head: pygit2.Commit, lineage_metadata: dict[str, Any] | None
    ) -> None:
        raw = _blob_bytes(repo, _blob_id(head.tree, formats.OBSERVATION_METADATA_FILE))
        if raw is None:
            self.find("observation-metadata-missing")
            return
        try:
            metadata = _strict_json(raw)
        except ValueError:
            metadata = None
        if not _observation_metadata_valid(metadata):
            self.find("observation-metadata-invalid")
            return
        assert isinstance(metadata, dict)
        if (metadata["lineage_branch"], metadata["observation_branch"]) != (
            self.paths.branch, self.paths.observation_branch,
        ):
            self.find("observation-branch-mismatch")
        if lineage_metadata is not None and any(
            metadata[key] != lineage_metadata[key] for key in _INSTRUMENT_KEYS
        ):
            self.find("metadata-disagree")

    def observation_history(self, repo: pygit2.Repository, chain: list[pygit2.Commit]) -> None:
        """Observations are appended, never edited or removed.

        Linear: a commit whose metadata.json is unchanged (or new) and whose
        ``generations/`` tree is a prefix of the newest one (its entries are sorted,
        and appended numbers sort last) only added files; only the other commits are
        diffed.
        """
        first = 1 if self.since is None else self.since.observation_commits
        folders = [_tree_id(commit.tree, formats.GENERATIONS_DIR) for commit in chain]
        prefixes = self.folders
        if prefixes is None or prefixes.final_id != folders[-1]:
            final = repo.odb.read(folders[-1])[1] if folders[-1] is not None else b""
            prefixes = _Prefixes(repo, "tree", final, folders[-1])
        prefixes.prepare(folders[first - 1:])
        metadata = [_blob_id(commit.tree, formats.OBSERVATION_METADATA_FILE) for commit in chain]
        for index in range(first, len(chain)):
            commit = chain[index]
            start, end = prefixes.length(folders[index - 1]), prefixes.length(folders[index])
            if (metadata[index - 1] in (None, metadata[index]) and start is not None
                    and end is not None and start <= end):
                continue
            deltas = chain[index - 1].tree.diff_to_tree(commit.tree).deltas
            rewritten = sorted(
                delta.old_file.path
                for delta in deltas
                if delta.status != pygit2.enums.DeltaStatus.ADDED
                and (delta.old_file.path == formats.OBSERVATION_METADATA_FILE
                     or formats.parse_observation_path(delta.old_file.path) is not None)
            )
            if rewritten:
                self.find("observation-rewritten",
                          formats.parse_observation_path(rewritten[0]))

    def observation_files(
        self, repo: pygit2.Repository, chain: list[pygit2.Commit]
    ) -> dict[int, list[bytes | None]]:
        """Each generation's observation files, by number; when resumed, a file the earlier
        audit checked (same name, same blob) is listed but not read (``None``)."""
        files: dict[int, list[bytes | None]] = {}
        folder_id = _tree_id(chain[-1].tree, formats.GENERATIONS_DIR)
        if folder_id is None:
            return files
        checked: dict[str, pygit2.Oid] = {}
        if self.since is not None:
            earlier = _tree_id(chain[self.since.observation_commits - 1].tree,
                               formats.GENERATIONS_DIR)
            if earlier is not None:
                checked = {entry.name or "": entry.id for entry in _tree(repo, earlier)}
        for entry in _tree(repo, folder_id):
            number = formats.parse_observation_path(f"{formats.GENERATIONS_DIR}/{entry.name}")
            if number is None or entry.type_str != "blob":
                continue
            if checked.get(entry.name or "") == entry.id:
                if number not in files:  # the one read again if a later record needs it
                    self.unread[number] = functools.partial(_blob_bytes, repo, entry.id)
                files.setdefault(number, []).append(None)
            else:
                files.setdefault(number, []).append(_blob_bytes(repo, entry.id) or b"")
        return files

    def observations_against(
        self,
        lineage_repo: pygit2.Repository,
        head: pygit2.Oid,
        generations: dict[int, tuple[pygit2.Oid, str | None]],
        files: dict[int, list[bytes | None]],
    ) -> None:
        self.observations = sum(len(found) for found in files.values())
        for number in sorted(set(files) - set(generations)):
            self.find("observation-extra", number)
        records: dict[int, dict[str, Any] | None] = {}  # read now (None: missing, invalid)
        for number, (commit_id, status) in sorted(generations.items()):
            found = files.get(number, [])
            records[number] = None
            if not found:
                self.find("observation-missing", number)
                continue
            if len(found) > 1:
                self.find("observation-duplicate", number)
            raw = found[0]
            if raw is None:  # the earlier audit checked this very file
                del records[number]
            else:
                records[number] = self._observation(
                    lineage_repo, head, number, commit_id, status, raw)
        self._running_totals(records)

    def _observation(
        self, repo: pygit2.Repository, head: pygit2.Oid, number: int,
        commit_id: pygit2.Oid, status: str | None, raw: bytes,
    ) -> dict[str, Any] | None:
        """Check one observation; its record if valid (None: ``observation-invalid``)."""
        record = _valid_record(raw, number)
        if record is None:
            self.find("observation-invalid", number)  # nothing else is read from it
            return None
        named = record["lineage_commit"]
        if named != str(commit_id):
            if self._ancestor(repo, head, named):
                self.find("observation-commit-mismatch", number)
            else:
                self.find("rewritten-history", number)
        outcome = record.get("outcome")
        if (
            isinstance(outcome, str)
            and status is not None
            and formats.status_of_outcome(outcome) not in (None, status)
        ):
            self.find("observation-status-mismatch", number)
        budget = _budget(record)
        if budget is not None and accounted_spend(record) > budget:
            self.find("overspend", number)
        return record

    def _running_totals(self, records: dict[int, dict[str, Any] | None]) -> None:
        """Each record read now that holds ``running_totals`` holds exactly the kernel's
        (module docstring). ``records``: generation -> its valid record, None when missing
        or invalid; a generation the earlier audit checked is absent, read here only if a
        later one needs it (``unread``)."""
        checked = sorted(number for number, record in records.items()
                         if record is not None and totals.TOTALS_KEY in record)
        folded = [totals.RunningTotals()]  # folded[k]: advance over records 1..k

        def record_of(number: int) -> Mapping[str, Any]:
            if number not in records:
                read = self.unread.get(number)
                records[number] = _valid_record(read(), number) if read is not None else None
            return records[number] or {}

        for number in checked:
            record = records[number]
            assert record is not None
            last = record_of(number - 1) if number > 1 else {}
            before = totals.from_json(last.get(totals.TOTALS_KEY))
            if before is None or before.generations != number - 1:
                while len(folded) < number:
                    folded.append(totals.advance(folded[-1], record_of(len(folded))))
                before = folded[number - 1]
            value = record[totals.TOTALS_KEY]
            if (totals.from_json(value) is None
                    or value != totals.to_json(totals.advance(before, record))):
                self.find("running-totals-mismatch", number)

    @staticmethod
    def _ancestor(repo: pygit2.Repository, head: pygit2.Oid, named: str) -> bool:
        if not _OBJECT_ID.match(named):
            return False
        try:
            oid = pygit2.Oid(hex=named)
            if not isinstance(readable(repo, oid), pygit2.Commit):
                return False
            return oid == head or bool(repo.descendant_of(head, oid))
        except (ValueError, KeyError, pygit2.GitError):
            return False


def _newest_folder(repo: pygit2.Repository, head: pygit2.Oid) -> _Prefixes | None:
    """The observations' newest ``generations/``, to recognise its earlier versions."""
    try:
        commit = readable(repo, head)
        if not isinstance(commit, pygit2.Commit) or not isinstance(
                readable(repo, commit.tree_id), pygit2.Tree):
            return None
        folder = _tree_id(commit.tree, formats.GENERATIONS_DIR)
        loaded = ObjectStore(repo).load(folder.raw) if folder is not None else None
        if folder is None or loaded is None:
            return None
        return _Prefixes(repo, "tree", loaded[1], folder)
    except (pygit2.GitError, ValueError, KeyError, OSError):
        return None


def _folder_versions(folders: _Prefixes | None) -> Callable[[bytes, bytes], bool] | None:
    """For the integrity pass: a version of the observations' ``generations/`` whose bytes
    are a prefix of the newest one is read whole (checked) but its entries are not walked
    again: they are the newest version's first entries, walked once."""
    if folders is None:
        return None
    name, newest = formats.GENERATIONS_DIR.encode(), folders.final_id

    def checked_whole(entry_name: bytes, entry: bytes) -> bool:
        oid = pygit2.Oid(raw=entry)
        return entry_name == name and oid != newest and folders.length(oid) is not None

    return checked_whole


def _objects(audit: _Audit) -> None:
    """Both repositories' reachable objects (when resumed, those after the audited heads);
    never raises (the later passes judge the rest)."""
    since = audit.since
    places = (
        (audit.paths.git_dir, audit.paths.branch, False,
         since.lineage_head if since else None),
        (audit.paths.observations, audit.paths.observation_branch, True,
         since.observation_head if since else None),
    )
    for place, branch, observations, audited in places:
        opened = open_repo(place)
        head = opened.head_id(branch) if opened is not None else None
        if opened is None or head is None:
            continue
        repo = opened.raw
        if audited is not None:
            if unreadable_since(repo, head, pygit2.Oid(hex=audited)):
                audit.find("object-unreadable")
            continue
        folders = _newest_folder(repo, head) if observations else None
        if observations:
            audit.folders = folders
        if unreadable_reachable(repo, head, _folder_versions(folders)):
            audit.find("object-unreadable")


def _run(audit: _Audit) -> None:
    _objects(audit)
    if audit.findings:  # an object that does not read whole: nothing else is judged
        raise HistoryUnreadable("object-unreadable")
    repo, chain, metadata = audit.lineage()
    generations = audit.walk(repo, chain)
    audit.journal_headings(repo, chain[-1])
    observed = audit.observation_repo()
    if observed is None:
        return
    obs_repo, obs_chain = observed
    head = obs_chain[-1]
    audit.observation_metadata(obs_repo, head, metadata)
    audit.observation_history(obs_repo, obs_chain)
    files = audit.observation_files(obs_repo, obs_chain)
    audit.observations_against(repo, chain[-1].id, generations, files)
    _probe_records(audit, generations, chain[0])


def _probe_records(audit: _Audit, generations: dict[int, tuple[pygit2.Oid, str | None]],
                   root: pygit2.Commit) -> None:
    """The probe records (``reconciler.state.probes``): each names its generation's commit
    (generation 0's: the seed, the root commit), each digest is its probe's, each holds
    what ouro's writer writes (``probe_rules``)."""
    commits = {number: str(oid) for number, (oid, _) in generations.items()}
    if not formats.is_generation_subject(_subject(root)):
        commits[0] = str(root.id)
    for kind, found in check_records(audit.paths, commits):
        number = found or None  # the seed's record: the lineage's (reports count from 1)
        match kind:  # (each code by name: the codes' test reads them here)
            case "commit":
                audit.find("probe-record-commit", number)
            case "digest":
                audit.find("probe-record-digest", number)
            case "name":
                audit.find("probe-record-name", number)
            case "metric-name":
                audit.find("probe-record-metric-name", number)
            case "number":
                audit.find("probe-record-number", number)
            case "size":
                audit.find("probe-record-size", number)
            case "kind":
                audit.find("probe-record-kind", number)
            case _:
                audit.find("probe-record-invalid", number)


def exception_class_name(error: BaseException) -> str | None:
    """Only an exception's class name, and only if it looks like one."""
    name = type(error).__name__
    return name if IDENTIFIER.match(name) else None


IDENTIFIER = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


def audit_lineage(paths: LineagePaths, name: str | None = None,
                  since: Resume | None = None,
                  parents: Callable[[str], LineagePaths | None] | None = None) -> LineageAudit:
    """Audit one lineage's history: all of it, or what came after ``since`` when today's
    histories continue it (else all of it). Never raises: unreadable -> ``unknown``.
    ``parents(name)``: where a fork's parent of that name lives (its link is checked)."""
    lineage = name if name is not None else paths.label
    started = time.monotonic()
    audit = _Audit(lineage, paths, since=since)
    try:
        try:
            _run(audit)
        except _NotResumable:
            audit = _Audit(lineage, paths)
            _run(audit)
        ancestry = audit.ancestry(parents)
    except Exception as error:  # unknown is not guilty: no partial accusation survives
        damage = tuple(f for f in audit.findings if f.code == "object-unreadable")
        if damage:  # ... but an unreadable object is no guess: the history is damaged
            return LineageAudit(lineage, "findings", commits=audit.commits, findings=damage,
                                duration_ms=_elapsed_ms(started))
        return LineageAudit(
            lineage, "unknown", duration_ms=_elapsed_ms(started),
            exception_class=exception_class_name(error),
        )
    findings = tuple(dict.fromkeys(audit.findings))  # stable, deduplicated
    return LineageAudit(
        lineage,
        "findings" if findings else "consistent",
        generations=audit.generations,
        observations=audit.observations,
        commits=audit.commits,
        findings=findings,
        duration_ms=_elapsed_ms(started),
        resumed=audit.since.generations if audit.since is not None else 0,
        lineage_head=audit.lineage_head,
        observation_head=audit.observation_head,
        observation_commits=audit.observation_commits,
        ancestry=ancestry,
    )


def _elapsed_ms(started: float) -> int:
    return max(0, int((time.monotonic() - started) * 1000))
