"""A small builder of real lineages (both repositories, pygit2), following docs/lineage-contract.md.

Independent of the kernel on purpose: the audit is checked against the contract,
not against the code that writes lineages. Every commit goes on the real
branches; tampering helpers write the kinds of damage the audit must find.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import RepositoryInitFlag

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import (
    GENERATION_SCHEMA,
    LINEAGE_SCHEMA,
    MODEL_CALL_SCHEMA,
    OBSERVATIONS_SCHEMA,
    Ceilings,
    LineagePaths,
    ModelConfig,
    constraints_manifest,
)
from tests.observe.builder import lineage_paths

SIG = pygit2.Signature("ouroboros", "ouroboros@localhost", 1_780_000_000, 0)
SEED = b';;; organism.el --- a test seed\n(message "alive")\n'
INSTRUMENT_COMMIT = "a" * 40
FINGERPRINT = "b" * 64
_FLAGS = RepositoryInitFlag.NO_DOTGIT_DIR | RepositoryInitFlag.MKPATH


def commit_of(repo: pygit2.Repository, oid: pygit2.Oid | str) -> pygit2.Commit:
    commit = repo[oid]
    assert isinstance(commit, pygit2.Commit)
    return commit


def blob_of(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes:
    blob = repo[oid]
    assert isinstance(blob, pygit2.Blob)
    return bytes(blob.data)


def tree_of(repo: pygit2.Repository, oid: pygit2.Oid) -> pygit2.Tree:
    tree = repo[oid]
    assert isinstance(tree, pygit2.Tree)
    return tree


def target(ref: pygit2.Reference) -> pygit2.Oid:
    oid = ref.target
    assert isinstance(oid, pygit2.Oid)
    return oid


def first_parent_chain(repo: pygit2.Repository, branch: str) -> list[pygit2.Commit]:
    """Root first."""
    chain = [commit_of(repo, target(repo.references[f"refs/heads/{branch}"]))]
    while chain[-1].parent_ids:
        chain.append(commit_of(repo, chain[-1].parent_ids[0]))
    return chain[::-1]




def _tree(repo: pygit2.Repository, files: dict[str, bytes]) -> pygit2.Oid:
    """Written as raw tree objects: libgit2's TreeBuilder refuses `.git` entries, and a
    hostile history is exactly what some tests need."""
    entries: list[tuple[str, bytes, bytes]] = []  # (sort key, mode, raw id)
    folders: dict[str, dict[str, bytes]] = {}
    for path, data in files.items():
        head, _, rest = path.partition("/")
        if rest:
            folders.setdefault(head, {})[rest] = data
        else:
            entries.append((head, b"100644 " + head.encode(), repo.create_blob(data).raw))
    for name, inner in folders.items():
        entries.append((name + "/", b"40000 " + name.encode(), _tree(repo, inner).raw))
    body = b"".join(mode + b"\0" + raw for _, mode, raw in sorted(entries))
    return repo.odb.write(pygit2.enums.ObjectType.TREE, body)


@dataclass
class Lineage:
    """A lineage under construction. ``files`` is the current committed tree."""

    paths: LineagePaths
    name: str
    repo: pygit2.Repository
    observations: pygit2.Repository
    files: dict[str, bytes] = field(default_factory=dict)
    generation: int = 0
    commits: dict[int, pygit2.Oid] = field(default_factory=dict)
    organism_versions: list[bytes] = field(default_factory=list)
    budget: str = "1.00"

    # ---------------------------------------------------------------- birth

    @classmethod
    def create(
        cls,
        root: Path,
        name: str = "t",
        *,
        seed_subject: str = "seed",
        lineage_meta: dict[str, Any] | None = None,
        observation_meta: dict[str, Any] | None = None,
        metadata_raw: bytes | None = None,
    ) -> Lineage:
        paths = lineage_paths(root, name)
        repo = pygit2.init_repository(
            str(paths.git_dir),
            flags=_FLAGS,
            workdir_path=str(paths.worktree),
            initial_head=paths.branch,
        )
        observations = pygit2.init_repository(
            str(paths.observations), initial_head=paths.observation_branch
        )
        lineage = cls(paths, name, repo, observations)
        lineage._birth(seed_subject, lineage_meta or {}, observation_meta or {}, metadata_raw)
        return lineage

    def metadata(self) -> dict[str, Any]:
        return {
            "schema": LINEAGE_SCHEMA,
            "instrument_repository": "https://example.invalid/ouro.git",
            "instrument_ref": "main",
            "instrument_commit": INSTRUMENT_COMMIT,
            "instrument_fingerprint": FINGERPRINT,
            "seed_sha256": hashlib.sha256(SEED).hexdigest(),
        }

    def _birth(
        self,
        subject: str,
        lineage_meta: dict[str, Any],
        observation_meta: dict[str, Any],
        metadata_raw: bytes | None,
    ) -> None:
        metadata = {**self.metadata(), **lineage_meta}
        raw = metadata_raw if metadata_raw is not None else json.dumps(metadata).encode()
        self.files = {"organism.el": SEED, "journal.md": b""}
        if raw:
            self.files[".ouroboros-lineage.json"] = raw
        self.organism_versions = [SEED]
        self.commit(subject, {})
        observed = {
            "schema": OBSERVATIONS_SCHEMA,
            "lineage_branch": self.paths.branch,
            "observation_branch": self.paths.observation_branch,
            **{k: v for k, v in self.metadata().items() if k != "schema"},
            **observation_meta,
        }
        self.observe(
            formats.observation_init_subject(self.paths.branch),
            {"metadata.json": json.dumps(observed, indent=2).encode() + b"\n"},
        )

    # ---------------------------------------------------------------- raw commits

    def commit(self, subject: str, changes: dict[str, bytes | None]) -> pygit2.Oid:
        """A lineage commit on the branch: ``changes`` maps path -> bytes (None deletes)."""
        for path, data in changes.items():
            if data is None:
                self.files.pop(path, None)
            else:
                self.files[path] = data
        ref = self.repo.references.get(f"refs/heads/{self.paths.branch}")
        parents = [target(ref)] if ref is not None else []
        oid = self.repo.create_commit(
            f"refs/heads/{self.paths.branch}",
            SIG,
            SIG,
            subject + "\n",
            _tree(self.repo, self.files),
            parents,
        )
        if self.files.get("organism.el") != self.organism_versions[-1]:
            self.organism_versions.append(self.files["organism.el"])
        return oid

    def observe(self, subject: str, changes: dict[str, bytes | None]) -> pygit2.Oid:
        """An observation commit: starts from the branch's current tree."""
        ref = self.observations.references.get(f"refs/heads/{self.paths.observation_branch}")
        files: dict[str, bytes] = {}
        parents: list[pygit2.Oid] = []
        if ref is not None:
            parents = [target(ref)]
            files = self._files_of(
                self.observations, commit_of(self.observations, target(ref)).tree
            )
        for path, data in changes.items():
            if data is None:
                files.pop(path, None)
            else:
                files[path] = data
        return self.observations.create_commit(
            f"refs/heads/{self.paths.observation_branch}",
            SIG,
            SIG,
            subject + "\n",
            _tree(self.observations, files),
            parents,
        )

    @classmethod
    def _files_of(
        cls, repo: pygit2.Repository, tree: pygit2.Tree, prefix: str = ""
    ) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for entry in tree:
            path = prefix + str(entry.name)
            if entry.type_str == "tree":
                files.update(cls._files_of(repo, tree_of(repo, entry.id), path + "/"))
            else:
                files[path] = blob_of(repo, entry.id)
        return files

    def head(self) -> pygit2.Oid:
        return target(self.repo.references[f"refs/heads/{self.paths.branch}"])

    # ---------------------------------------------------------------- generations

    def _timestamp(self, n: int) -> str:
        return f"2026-11-29T15:{n % 60:02d}:00+00:00"

    def record(
        self,
        n: int,
        outcome: str,
        commit: pygit2.Oid,
        *,
        calls: list[dict[str, Any]],
        exit_status: int = 0,
    ) -> dict[str, Any]:
        constraints = constraints_manifest(
            Ceilings(), ModelConfig("openai", "gpt-5.6", budget_usd=Decimal(self.budget))
        )
        return {
            "schema": GENERATION_SCHEMA,
            "generation": n,
            "started_at": self._timestamp(n),
            "duration_ms": 500,
            "outcome": outcome,
            "exit_status": exit_status,
            "systemd_result": "success" if exit_status == 0 else "exit-code",
            "cpu_usage_nsec": 12_000_000,
            "memory_peak_bytes": 4_194_304,
            "oom_kills": 0,
            "lineage_commit": str(commit),
            "result_archive_bytes": 10240,
            "published_bytes": None if exit_status else 100,
            "published_files": None if exit_status else 2,
            "provider": "openai",
            "model": "gpt-5.6",
            "constraints": constraints,
            "model_calls": calls,
            "stderr_tail": "",
        }

    @staticmethod
    def call(n: int, accounted: str | None = "0.01", reserved: str = "0.05") -> dict[str, Any]:
        return {
            "schema": MODEL_CALL_SCHEMA,
            "generation": n,
            "request_index": 1,
            "operation": "generate",
            "http_status": 200,
            "error": None,
            "reserved_usd": reserved,
            "accounted_usd": accounted,
        }

    def write_observation(self, n: int, record: dict[str, Any], subject_outcome: str) -> None:
        self.observe(
            formats.observation_subject(n, subject_outcome),
            {formats.observation_path(n): json.dumps(record, indent=2).encode() + b"\n"},
        )

    def _publish(
        self,
        subject: str,
        status: formats.Status,
        changes: dict[str, bytes | None],
        entry: str,
        outcome: str,
        *,
        exit_status: int = 0,
        calls: list[dict[str, Any]] | None = None,
        observe: bool = True,
    ) -> pygit2.Oid:
        n = self.generation + 1
        journal = formats.append_entry(self.files["journal.md"].decode(), entry).encode()
        oid = self.commit(subject, {**changes, "journal.md": journal})
        self.generation = n
        self.commits[n] = oid
        if observe:
            record = self.record(
                n,
                outcome,
                oid,
                exit_status=exit_status,
                calls=[self.call(n)] if calls is None else calls,
            )
            self.write_observation(n, record, outcome)
        return oid

    def no_change(self, **options: Any) -> pygit2.Oid:
        n = self.generation + 1
        entry = formats.journal_entry(n, "no-change", self._timestamp(n))
        return self._publish(
            formats.subject_no_change(n), "no-change", {}, entry, "no-change", **options
        )

    def changed(self, changes: dict[str, bytes | None], **options: Any) -> pygit2.Oid:
        n = self.generation + 1
        organism = changes.get("organism.el")
        before = self.files["organism.el"].decode().splitlines()
        after = organism.decode().splitlines() if organism is not None else before
        change = formats.Change(
            organism_added=len([line for line in after if line not in before]),
            organism_deleted=len([line for line in before if line not in after]),
            organism_changed=organism is not None and organism != self.files["organism.el"],
            paths=len(changes),
        )
        entry = formats.journal_entry(n, "changed", self._timestamp(n), detail=change.detail)
        return self._publish(
            formats.subject_changed(n, change),
            "changed",
            changes,
            entry,
            formats.outcome_text("changed", change.detail),
            **options,
        )

    def restored_body(self) -> bytes:
        """The contract: the organism as it was before its most recent change."""
        versions = self.organism_versions
        return versions[-2] if len(versions) >= 2 else versions[-1]

    def died(
        self,
        exit_status: int = 3,
        *,
        body: bytes | None = None,
        extra: dict[str, bytes | None] | None = None,
        **options: Any,
    ) -> pygit2.Oid:
        n = self.generation + 1
        entry = formats.journal_entry(
            n, "died", self._timestamp(n), exit_status=exit_status, stderr_lines=["lethal"]
        )
        restored = self.restored_body() if body is None else body
        return self._publish(
            formats.subject_died(n, exit_status),
            "died",
            {"organism.el": restored, **(extra or {})},
            entry,
            "process_exit",
            exit_status=exit_status,
            calls=[],
            **options,
        )

    def external_edit(self, changes: dict[str, bytes | None]) -> pygit2.Oid:
        return self.commit(formats.EXTERNAL_EDIT_SUBJECT, changes)

    # ---------------------------------------------------------------- tampering

    def observation_record(self, n: int) -> dict[str, Any]:
        ref = self.observations.references[f"refs/heads/{self.paths.observation_branch}"]
        tree = commit_of(self.observations, target(ref)).tree
        data = blob_of(self.observations, (tree / formats.observation_path(n)).id)
        record: dict[str, Any] = json.loads(data)
        return record

    def rewrite_observation(self, n: int, record: Any, *, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(record).encode()
        self.observe(f"observe: gen {n} edited", {formats.observation_path(n): data})

    def rewrite_history_from(self, n: int, extra: dict[str, bytes]) -> None:
        """Rebuild the branch from generation n's commit on, with ``extra`` files in every
        tree from there: same subjects, new commit ids (a rewritten history)."""
        chain = first_parent_chain(self.repo, self.paths.branch)
        start = next(i for i, c in enumerate(chain) if c.id == self.commits[n])
        parent = chain[start - 1].id
        for old in chain[start:]:
            files = {**self._files_of(self.repo, old.tree), **extra}
            parent = self.repo.create_commit(
                None, SIG, SIG, old.message, _tree(self.repo, files), [parent]
            )
        self.repo.references[f"refs/heads/{self.paths.branch}"].set_target(parent)
