"""Build real lineages for tests with pygit2, in docs/lineage-contract.md's formats.

A ``LineageBuilder`` writes the three places (worktree + separate git dir,
observation repo), a ``seed`` commit with (or without) metadata, generation
commits ``gen N: ...`` with their observation ``generations/NNNN.json``,
``external edit`` and hand commits, and can damage them on purpose. Every
commit is also checked out (worktree files and index), so a fresh lineage is
clean.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pygit2

from reconciler.kernel.base import formats, totals
from reconciler.kernel.base.config import (
    GENERATION_SCHEMA,
    LINEAGE_SCHEMA,
    METADATA_FILE,
    OBSERVATIONS_SCHEMA,
    Ceilings,
    Identity,
    LineagePaths,
    ModelConfig,
    constraints_manifest,
)

SIGNATURE = pygit2.Signature("ouroboros", "ouroboros@localhost", 1_700_000_000, 0)
TEST_IDENTITY = Identity(
    repository="https://example.invalid/ouro.git",
    ref="main",
    commit="5" * 40,
    fingerprint="f" * 64,
)
SEED_ORGANISM = b";;; organism.el --- test seed\n(message \"alive\")\n"


def lineage_paths(root: Path, name: str) -> LineagePaths:
    return LineagePaths(
        worktree=root / name,
        git_dir=root / f"{name}.git",
        observations=root / f"{name}.observations",
        branch=f"lineage-{name}",
        observation_branch=f"observations/lineage-{name}",
    )


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


class LineageBuilder:
    """A lineage under construction; each method makes one commit and returns its id."""

    def __init__(
        self,
        root: Path,
        name: str = "alpha",
        *,
        identity: Identity = TEST_IDENTITY,
        metadata: bool = True,
        observations: bool = True,
        paths: LineagePaths | None = None,
        running_totals: bool = False,
    ) -> None:
        self.paths = paths or lineage_paths(root, name)
        self.identity = identity
        self.generation = 0
        # ``running_totals``: each observation carries the lineage's totals through it, as
        # physics release 4's kernel records them (``reconciler.kernel.base.totals``)
        self.running = totals.RunningTotals() if running_totals else None
        self.journal = ""
        self.repo = pygit2.init_repository(
            str(self.paths.git_dir), bare=False, workdir_path=str(self.paths.worktree),
            initial_head=f"refs/heads/{self.paths.branch}",
            # without NO_DOTGIT_DIR libgit2 would put the repository in <git_dir>/.git
            flags=pygit2.enums.RepositoryInitFlag.MKPATH
            | pygit2.enums.RepositoryInitFlag.NO_DOTGIT_DIR,
        )
        dotgit = self.paths.worktree / ".git"
        if not dotgit.is_file():
            dotgit.write_text(f"gitdir: {self.paths.git_dir}\n", encoding="utf-8")
        self.repo.config["core.worktree"] = str(self.paths.worktree)
        files: dict[str, bytes | None] = {"organism.el": SEED_ORGANISM, "journal.md": b""}
        if metadata:
            files[METADATA_FILE] = _json(self.lineage_metadata())
        self.seed = self._commit(files, formats.SEED_SUBJECT)
        self.obs: pygit2.Repository | None = None
        if observations:
            self.obs = pygit2.init_repository(
                str(self.paths.observations), bare=False,
                initial_head=f"refs/heads/{self.paths.observation_branch}",
            )
            self._observe({"metadata.json": _json(self.observation_metadata())},
                          formats.observation_init_subject(self.paths.branch))

    # ------------------------------------------------------------ metadata

    def lineage_metadata(self) -> dict[str, Any]:
        return {
            "schema": LINEAGE_SCHEMA,
            "instrument_repository": self.identity.repository,
            "instrument_ref": self.identity.ref,
            "instrument_commit": self.identity.commit,
            "instrument_fingerprint": self.identity.fingerprint,
            "seed_sha256": "0" * 64,
        }

    def observation_metadata(self) -> dict[str, Any]:
        return {
            "schema": OBSERVATIONS_SCHEMA,
            "lineage_branch": self.paths.branch,
            "observation_branch": self.paths.observation_branch,
            **{k: v for k, v in self.lineage_metadata().items() if k != "schema"},
        }

    # ------------------------------------------------------------ commits

    @property
    def head(self) -> str:
        return str(self.repo.references[f"refs/heads/{self.paths.branch}"].target)

    def _tree(self, base: pygit2.Tree | None, files: dict[str, bytes | None],
              repo: pygit2.Repository) -> pygit2.Oid:
        """``base`` with ``files`` set (None deletes); supports one level of folders."""
        builder = repo.TreeBuilder(base) if base is not None else repo.TreeBuilder()
        folders: dict[str, dict[str, bytes | None]] = {}
        for name, data in files.items():
            if "/" in name:
                folder, rest = name.split("/", 1)
                folders.setdefault(folder, {})[rest] = data
            elif data is None:
                if builder.get(name) is not None:
                    builder.remove(name)
            else:
                builder.insert(name, repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
        for folder, content in folders.items():
            existing = builder.get(folder)
            found = repo[existing.id] if existing is not None else None
            sub = found if isinstance(found, pygit2.Tree) else None
            builder.insert(folder, self._tree(sub, content, repo), pygit2.GIT_FILEMODE_TREE)
        return builder.write()

    def _commit(self, files: dict[str, bytes | None], subject: str, *,
                parents: list[str] | None = None, move_branch: bool = True) -> str:
        branch = f"refs/heads/{self.paths.branch}"
        if parents is None:
            parents = [self.head] if not self.repo.head_is_unborn else []
        base = self.repo[parents[0]].tree if parents else None
        tree = self._tree(base, files, self.repo)
        oid = self.repo.create_commit(None, SIGNATURE, SIGNATURE, subject + "\n", tree, parents)
        if move_branch:
            self.repo.references.create(branch, oid, force=True)
            self.checkout()
        return str(oid)

    def checkout(self) -> None:
        """Worktree files and index = the branch head (removes nothing it did not write)."""
        self.repo.checkout(f"refs/heads/{self.paths.branch}",
                           strategy=pygit2.GIT_CHECKOUT_FORCE)

    def _observe(self, files: dict[str, bytes | None], subject: str) -> str:
        assert self.obs is not None
        branch = f"refs/heads/{self.paths.observation_branch}"
        parents = [] if self.obs.head_is_unborn else [str(self.obs.head.target)]
        base = self.obs[parents[0]].tree if parents else None
        tree = self._tree(base, files, self.obs)
        oid = self.obs.create_commit(None, SIGNATURE, SIGNATURE, subject + "\n", tree, parents)
        self.obs.references.create(branch, oid, force=True)
        self.obs.checkout(branch, strategy=pygit2.GIT_CHECKOUT_FORCE)
        return str(oid)

    def record(self, n: int, commit: str, *, outcome: str = "no-change",
               model: ModelConfig | None = None, ceilings: Ceilings | None = None,
               calls: list[dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
        model = model or ModelConfig(provider="echo", name="echo")
        value: dict[str, Any] = {
            "schema": GENERATION_SCHEMA,
            "generation": n,
            "started_at": "2026-11-29T15:45:59+00:00",
            "duration_ms": 500,
            "outcome": outcome,
            "exit_status": 0 if formats.status_of_outcome(outcome) != "died" else 3,
            "systemd_result": "success",
            "cpu_usage_nsec": None,
            "memory_peak_bytes": None,
            "oom_kills": 0,
            "lineage_commit": commit,
            "result_archive_bytes": 10240,
            "published_bytes": 100,
            "published_files": 2,
            "provider": model.provider,
            "model": model.name,
            "constraints": constraints_manifest(ceilings or Ceilings(), model),
            "model_calls": calls or [],
            "stderr_tail": [],
        }
        value.update(overrides)
        return value

    def observe(self, n: int, commit: str, **kwargs: Any) -> str:
        record = self.record(n, commit, **kwargs)
        if self.running is not None and totals.TOTALS_KEY not in record:
            self.running = totals.advance(self.running, record)
            record[totals.TOTALS_KEY] = totals.to_json(self.running)
        return self._observe({formats.observation_path(n): _json(record)},
                             formats.observation_subject(n, record["outcome"]))

    def gen(self, status: str = "no-change", *, observe: bool = True,
            move_branch: bool = True, **record: Any) -> str:
        """One generation: the lineage commit, its journal entry and (by default) observation."""
        n = self.generation + 1
        stamp = "2026-11-29T15:46:00+00:00"
        files: dict[str, bytes | None] = {}
        if status == "died":
            subject = formats.subject_died(n, 3)
            entry = formats.journal_entry(n, "died", stamp, exit_status=3, stderr_lines=["x"])
            outcome = record.pop("outcome", "process_exit")
        elif status == "changed":
            change = formats.Change(organism_changed=True, organism_added=1, paths=1)
            subject = formats.subject_changed(n, change)
            entry = formats.journal_entry(n, "changed", stamp, detail=change.detail)
            files["organism.el"] = SEED_ORGANISM + f";; gen {n}\n".encode()
            outcome = record.pop("outcome", formats.outcome_text("changed", change.detail))
        else:
            subject = formats.subject_no_change(n)
            entry = formats.journal_entry(n, "no-change", stamp)
            outcome = record.pop("outcome", "no-change")
        journal = formats.append_entry(self.journal, entry)
        files["journal.md"] = journal.encode("utf-8")
        commit = self._commit(files, subject, move_branch=move_branch)
        if move_branch:
            self.journal = journal
            self.generation = n
        if observe:
            self.observe(n, commit, outcome=outcome, **record)
        return commit

    def external_edit(self, name: str = "notes.txt", data: bytes = b"a human was here\n") -> str:
        return self._commit({name: data}, formats.EXTERNAL_EDIT_SUBJECT)

    def hand_commit(self, subject: str, name: str = "hand.txt") -> str:
        return self._commit({name: subject.encode()}, subject)

    # ------------------------------------------------------------ damage

    def write_marker(self, **fields: Any) -> Path:
        marker = {
            "schema": "ouro-generation-intent/v1",
            "generation": self.generation + 1,
            "lineage_head": self.head,
            "observation_head": str(self.obs.head.target) if self.obs else None,
            "phase": "running",
            "private_dir": "/tmp/none",
            "pid": os.getpid(),
            "started_at": "2026-11-29T15:46:00+00:00",
        }
        marker.update(fields)
        path = self.paths.git_dir / "ouro-generation.json"
        path.write_text(json.dumps(marker), encoding="utf-8")
        return path

    def set_observation_metadata(self, **fields: Any) -> None:
        self._observe({"metadata.json": _json({**self.observation_metadata(), **fields})},
                      "hand: edit metadata")

    def drop_observation(self, n: int) -> None:
        self._observe({formats.observation_path(n): None}, f"hand: drop {n}")
