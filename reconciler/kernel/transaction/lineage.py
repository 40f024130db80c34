"""Lineage birth: the three places of a new lineage and their first commits.

Trusted harness; never mounted into a generation. Birth is all or nothing:
every check runs before the first write, and a failure part-way removes
whatever this call created (and only that). All git access is pygit2.

    <worktree>/.git          "gitdir: <git dir>" (the history lives outside the tree)
    <git dir>                core.worktree = <worktree>; branch lineage-<name>, root commit `seed`
    <observations>/          ordinary repo; branch observations/lineage-<name>,
                             root commit `observe: initialize <lineage branch>`
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import RepositoryInitFlag as InitFlag

from ..base.config import (
    ENTRY_METADATA_KEY,
    ENTRY_REQUEST_SCHEMA,
    JOURNAL_FILE,
    LINEAGE_SCHEMA,
    METADATA_FILE,
    OBSERVATIONS_SCHEMA,
    ORGANISM_FILE,
    Identity,
    LineagePaths,
)
from ..base.errors import BirthError
from ..base.formats import (
    INSTRUMENT_KEYS,
    OBSERVATION_METADATA_FILE,
    SEED_SUBJECT,
    observation_init_subject,
)
from ..base.identity import OBJECT_ID, is_object_id

__all__ = [
    "OBSERVATION_METADATA_FILE",
    "ORGANISM",
    "SIGNATURE",
    "init_lineage",
    "lineage_metadata",
    "observation_metadata",
    "read_json_blob",
    "read_lineage_metadata",
    "seed_sha256",
]

SIGNATURE = pygit2.Signature("ouroboros", "ouroboros@localhost")
ORGANISM = Path(__file__).with_name(ORGANISM_FILE)
# The git dir is exactly the given path (no nested .git); never reinitialise anything.
_INIT_FLAGS = InitFlag.NO_DOTGIT_DIR | InitFlag.NO_REINIT


def seed_sha256() -> str:
    """sha256 of the canonical seed organism's bytes."""
    return hashlib.sha256(ORGANISM.read_bytes()).hexdigest()


def lineage_metadata(identity: Identity, seed_digest: str) -> dict[str, Any]:
    """The ``.ouroboros-lineage.json`` object of a lineage born under ``identity``."""
    return {
        "schema": LINEAGE_SCHEMA,
        **_instrument(identity, seed_digest),
    }


def _instrument(identity: Identity, seed_digest: str) -> dict[str, str]:
    """The ``INSTRUMENT_KEYS`` of both metadata files, then ouro's addition: the entry
    point of the kernel that must extend the lineage (``ENTRY_METADATA_KEY``)."""
    keys = dict(zip(INSTRUMENT_KEYS, (identity.repository, identity.ref, identity.commit,
                                      identity.fingerprint, seed_digest), strict=True))
    return {**keys, ENTRY_METADATA_KEY: ENTRY_REQUEST_SCHEMA}


def observation_metadata(
    paths: LineagePaths, identity: Identity, seed_digest: str
) -> dict[str, Any]:
    """The observation repo's ``metadata.json`` object."""
    return {
        "schema": OBSERVATIONS_SCHEMA,
        "lineage_branch": paths.branch,
        "observation_branch": paths.observation_branch,
        **_instrument(identity, seed_digest),
    }


def read_json_blob(repo: pygit2.Repository, commit_id: str, path: str) -> dict[str, Any] | None:
    """A JSON object stored at ``path`` in a commit; None if absent or not a JSON object."""
    try:
        commit = repo.revparse_single(commit_id).peel(pygit2.Commit)
        blob = commit.tree[path]
        if not isinstance(blob, pygit2.Blob):
            return None
        value = json.loads(blob.data.decode("utf-8"))
    except (KeyError, ValueError, pygit2.GitError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def read_lineage_metadata(
    repo: pygit2.Repository, commit_id: str = "HEAD"
) -> dict[str, Any] | None:
    """``.ouroboros-lineage.json`` as of a commit (default HEAD); None if absent or not JSON."""
    return read_json_blob(repo, commit_id, METADATA_FILE)


def _json_text(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _check(paths: LineagePaths, identity: Identity) -> None:
    """Every refusal, before anything is written."""
    places = {"worktree": paths.worktree, "git dir": paths.git_dir,
              "observation repo": paths.observations}
    resolved = {label: Path(os.path.abspath(place)) for label, place in places.items()}
    if len(set(resolved.values())) != len(resolved):
        raise BirthError(
            "kernel: the worktree, git dir and observation repo must be three distinct paths"
        )
    for label, place in resolved.items():
        if os.path.lexists(place):
            raise BirthError(
                f"kernel: {label} {place} already exists; a lineage is born in three new paths"
            )
    for label, place in resolved.items():
        for other in resolved.values():
            if other != place and other.is_relative_to(place):
                raise BirthError(f"kernel: {label} {place} would contain {other}")
    for label, branch in (("lineage branch", paths.branch),
                          ("observation branch", paths.observation_branch)):
        # git's check-ref-format rules, plus what `git branch` refuses on top of them
        if (not branch or branch.startswith("-") or branch == "HEAD"
                or not pygit2.reference_is_valid_name(f"refs/heads/{branch}")):
            raise BirthError(f"kernel: {label} {branch!r} is not a valid git branch name")
    if not is_object_id(identity.commit):
        raise BirthError(
            f"kernel: instrument commit {identity.commit!r} is not a full hex git object id"
        )
    if not OBJECT_ID.match(identity.fingerprint) or len(identity.fingerprint) != 64:
        raise BirthError(
            f"kernel: instrument fingerprint {identity.fingerprint!r} is not a 64-hex sha256"
        )


def _missing_ancestors(path: Path) -> list[Path]:
    """Ancestors of ``path`` that do not exist yet, outermost first."""
    missing = [parent for parent in path.parents if not os.path.lexists(parent)]
    return list(reversed(missing))


def _commit_files(repo: pygit2.Repository, files: dict[str, bytes], subject: str) -> None:
    """Write ``files`` into the worktree, stage them and make the root commit on HEAD."""
    workdir = Path(repo.workdir)
    for name, data in files.items():
        (workdir / name).write_bytes(data)
    index = repo.index
    for name in files:
        index.add(name)
    index.write()
    tree = index.write_tree()
    repo.create_commit("HEAD", SIGNATURE, SIGNATURE, subject + "\n", tree, [])


def init_lineage(paths: LineagePaths, identity: Identity) -> None:
    """Create a lineage's three places, or raise ``BirthError`` having written nothing.

    The worktree gets the canonical organism (byte copy), an empty journal and the
    lineage metadata in a root commit ``seed`` on ``paths.branch``; its history
    lives in ``paths.git_dir``. The observation repo gets ``metadata.json`` in a
    root commit ``observe: initialize <branch>`` on ``paths.observation_branch``.
    """
    _check(paths, identity)
    worktree = Path(os.path.abspath(paths.worktree))
    git_dir = Path(os.path.abspath(paths.git_dir))
    observations = Path(os.path.abspath(paths.observations))
    try:
        seed = ORGANISM.read_bytes()
    except OSError as exc:
        raise BirthError(f"kernel: cannot read the canonical seed {ORGANISM}: {exc}") from exc
    digest = hashlib.sha256(seed).hexdigest()

    created: list[Path] = []  # only what this call made, in order: undone newest first
    try:
        for place in (worktree, git_dir, observations):
            for ancestor in _missing_ancestors(place):
                try:
                    ancestor.mkdir()
                except FileExistsError:
                    continue  # made by someone else meanwhile: not ours to remove
                created.append(ancestor)
            place.mkdir()  # FileExistsError if another birth got here first
            created.append(place)

        lineage = pygit2.init_repository(
            str(git_dir), bare=False, flags=_INIT_FLAGS, workdir_path=str(worktree),
            initial_head=f"refs/heads/{paths.branch}",
        )
        # As `git clone --separate-git-dir` spells them (libgit2 adds trailing slashes).
        (worktree / ".git").write_text(f"gitdir: {git_dir}\n", encoding="utf-8")
        lineage.config["core.worktree"] = str(worktree)
        _commit_files(
            lineage,
            {
                ORGANISM_FILE: seed,
                JOURNAL_FILE: b"",
                METADATA_FILE: _json_text(lineage_metadata(identity, digest)),
            },
            SEED_SUBJECT,
        )

        observed = pygit2.init_repository(
            str(observations), bare=False, flags=InitFlag.NO_REINIT,
            initial_head=f"refs/heads/{paths.observation_branch}",
        )
        _commit_files(
            observed,
            {OBSERVATION_METADATA_FILE: _json_text(observation_metadata(paths, identity, digest))},
            observation_init_subject(paths.branch),
        )
    except (OSError, pygit2.GitError, ValueError) as exc:
        _remove(created, (worktree, git_dir, observations))
        raise BirthError(f"kernel: creating lineage {paths.branch} failed: {exc}") from exc
    except BaseException:
        _remove(created, (worktree, git_dir, observations))
        raise


def _remove(created: list[Path], places: tuple[Path, ...]) -> None:
    """Undo a partial birth: only what this call made, newest first.

    The three places were made by this call (mkdir succeeded), so all of their
    contents are ours. An ancestor directory we made may meanwhile hold someone
    else's work: it goes only if it is empty.
    """
    for path in reversed(created):
        if path in places:
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.rmdir()
