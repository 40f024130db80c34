"""A fork's birth: the three places of a lineage whose seed is another's generation tree.

Rule: the control plane births a fork (the kernel births only the canonical seed, and
physics release 2 has shipped); what it writes is what the kernel's own birth writes,
but for the seed tree: the root commit ``seed`` on the lineage branch is the parent's
generation tree, every entry the parent's object with its mode, with the child's
metadata and the fork's journal (``state.forks``); the observation repository's root
commit carries the same metadata keys. The kernel then extends it like any lineage (it
checks the root metadata's identity, never the seed tree). The parent is only read: its
objects are copied, and nothing of it is locked or written. All or nothing: a failure
removes what this call made (and only that). All git access is pygit2.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2
from pygit2.enums import RepositoryInitFlag as InitFlag

from reconciler.errors import ApplyError
from reconciler.kernel.base.config import (
    ENTRY_REQUEST_SCHEMA,
    JOURNAL_FILE,
    METADATA_FILE,
    ORGANISM_FILE,
    Identity,
    LineagePaths,
)
from reconciler.kernel.base.formats import SEED_SUBJECT, observation_init_subject
from reconciler.kernel.transaction import lineage as kernel_lineage
from reconciler.kernel.transaction import publish
from reconciler.state import kernel_store
from reconciler.state.branches import spec_paths
from reconciler.state.forks import (
    FORK_KEY,
    ForkSource,
    birth_marker,
    fork_journal,
    fork_record,
    read_source,
    tree_blob,
)
from reconciler.state.kernel_store import KernelFacts, KernelStore

if TYPE_CHECKING:
    from reconciler.spec.load import LoadedSpec
    from reconciler.state.observe import Observed

__all__ = ["birth_fork", "fork_facts", "fork_source", "ran_with_fork"]

_INIT_FLAGS = InitFlag.NO_DOTGIT_DIR | InitFlag.NO_REINIT


def fork_source(spec: LoadedSpec, observed: Observed) -> ForkSource | None:
    """The parent generation a fork yet to be born starts from (None: not a fork, or born)."""
    fork, parent = spec.fork, spec.fork_parent
    if fork is None or parent is None or observed.any_exists:
        return None
    source = read_source(spec_paths(parent), fork.generation)
    if (fork.kernel == "parent" and source.problem is None
            and not isinstance(source.metadata.get("instrument_fingerprint"), str)):
        return dataclasses.replace(
            source, problem="fork-unreadable",
            detail=f"lineage {fork.lineage} records no kernel (its root has no "
                   "metadata), so kernel: parent names none; fork it under the running "
                   "kernel (drop kernel: parent)")
    return source


def fork_facts(spec: LoadedSpec, source: ForkSource | None, running: Identity,
               store: KernelStore) -> KernelFacts | None:
    """``kernel: parent``: the facts of the parent's kernel, chosen as if to extend the
    parent (running if identical, else the store, the checkout, or refused)."""
    if source is None or source.problem is not None or spec.fork is None:
        return None
    if spec.fork.kernel != "parent":
        return None
    return kernel_store.gather(source.metadata, running, ENTRY_REQUEST_SCHEMA, store)


def ran_with_fork(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ancestry record generation 1's ``ran_with`` carries (None: not a fork)."""
    record = (metadata or {}).get(FORK_KEY)
    return dict(record) if isinstance(record, dict) else None


def _json_text(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _copy_tree(source: pygit2.Repository, target: pygit2.Repository, tree_id: pygit2.Oid) -> None:
    """Every object of a tree, from the parent's store into the child's, byte for byte: one
    pack (libgit2's pack builder; a loose object each cost a file apiece: 7.6 s against
    1.0 s for 5,055 objects here), its ids the parent's."""
    builder = pygit2.PackBuilder(source)
    builder.add_recur(tree_id)
    builder.write(os.path.join(target.path, "objects", "pack"))
    copied = target.get(tree_id)
    if not isinstance(copied, pygit2.Tree):
        raise ApplyError(f"ouro: the parent's tree {tree_id} did not copy as itself: this "
                         "parent cannot be forked here")


def _seed_tree(repo: pygit2.Repository, parent_tree: pygit2.Tree, journal: bytes,
               metadata: bytes) -> pygit2.Oid:
    copied = repo.get(parent_tree.id)  # the child's own copy (``_copy_tree``)
    assert isinstance(copied, pygit2.Tree)
    builder = repo.TreeBuilder(copied)
    builder.insert(JOURNAL_FILE, repo.create_blob(journal), pygit2.enums.FileMode.BLOB)
    builder.insert(METADATA_FILE, repo.create_blob(metadata), pygit2.enums.FileMode.BLOB)
    oid: pygit2.Oid = builder.write()
    return oid


def _places(paths: LineagePaths) -> tuple[Path, Path, Path]:
    return (Path(os.path.abspath(paths.worktree)), Path(os.path.abspath(paths.git_dir)),
            Path(os.path.abspath(paths.observations)))


def _make_folders(folders: list[Path], created: list[Path]) -> None:
    """Each of ``folders`` (outermost first) made when missing; what this made, noted."""
    for folder in folders:
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # made by someone else meanwhile: not ours to remove
        created.append(folder)


def _make_places(places: tuple[Path, ...], created: list[Path]) -> None:
    for place in places:
        _make_folders(list(reversed([p for p in place.parents if not os.path.lexists(p)])),
                      created)
        place.mkdir()  # FileExistsError if another birth got here first
        created.append(place)


def birth_fork(paths: LineagePaths, spec: LoadedSpec, identity: Identity) -> dict[str, Any]:
    """Birth the fork ``spec`` at ``paths`` under ``identity`` (the kernel that will extend
    it); the parent is read again now. Returns the ancestry record; raises ``ApplyError``
    having written nothing when the parent no longer is a fork source."""
    fork, parent = spec.fork, spec.fork_parent
    assert fork is not None and parent is not None
    parent_paths = spec_paths(parent)
    source = read_source(parent_paths, fork.generation)
    if source.problem is not None or source.commit is None:
        raise ApplyError(f"ouro: lineage {spec.name}: cannot fork from gen {fork.generation} "
                         f"of {fork.lineage}: {source.detail}; nothing was created")
    record = fork_record(source, fork.kernel, identity.fingerprint)
    places = _places(paths)
    marker = birth_marker(paths.git_dir)
    if os.path.lexists(marker):  # a birth of it was cut off (killed): its leftovers go
        _remove(list(places), places)
        marker.unlink()
    if any(os.path.lexists(place) for place in places):
        raise ApplyError(f"ouro: lineage {spec.name}: a place of it exists already; a fork is "
                         "born in three new paths")
    created: list[Path] = []
    try:
        _make_folders([*reversed([p for p in marker.parents if not os.path.lexists(p)])],
                      created)
        _begin(marker)
        _make_places(places, created)
        _write(paths, places, parent_paths, source, record, identity)
    except BaseException as error:
        _remove(created, places)
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()
        if isinstance(error, OSError | pygit2.GitError | ValueError):
            raise ApplyError(f"ouro: lineage {spec.name}: forking from {fork.lineage} failed "
                             f"({error}); nothing was kept") from error
        raise
    marker.unlink()  # born whole: from here it is a lineage like any other
    return record


def _begin(marker: Path) -> None:
    """The birth's marker, on disk (its folder synced) before any place of it is made."""
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.write(fd, b"a fork's birth began here and has not ended (docs/contract.md)\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    folder = os.open(marker.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _write(paths: LineagePaths, places: tuple[Path, Path, Path], parent_paths: LineagePaths,
           source: ForkSource, record: dict[str, Any], identity: Identity) -> None:
    worktree, git_dir, observations = places
    parent_repo = pygit2.Repository(str(parent_paths.git_dir),
                                    pygit2.enums.RepositoryOpenFlag.NO_SEARCH
                                    | pygit2.enums.RepositoryOpenFlag.BARE)
    commit = parent_repo.get(str(source.commit))
    assert isinstance(commit, pygit2.Commit)
    digest = hashlib.sha256(tree_blob(parent_repo, commit.tree, ORGANISM_FILE) or b"")
    metadata = {**kernel_lineage.lineage_metadata(identity, digest.hexdigest()),
                FORK_KEY: record}
    repo = pygit2.init_repository(str(git_dir), bare=False, flags=_INIT_FLAGS,
                                  workdir_path=str(worktree),
                                  initial_head=f"refs/heads/{paths.branch}")
    (worktree / ".git").write_text(f"gitdir: {git_dir}\n", encoding="utf-8")
    repo.config["core.worktree"] = str(worktree)
    _copy_tree(parent_repo, repo, commit.tree.id)
    tree = _seed_tree(repo, commit.tree, fork_journal(source.journal, record),
                      _json_text(metadata))
    author = publish.signature()
    seed = repo.create_commit("HEAD", author, author, SEED_SUBJECT + "\n", tree, [])
    seeded = repo.get(seed)
    assert isinstance(seeded, pygit2.Commit)
    publish.checkout_worktree(repo, seeded)

    observed = pygit2.init_repository(str(observations), bare=False, flags=InitFlag.NO_REINIT,
                                      initial_head=f"refs/heads/{paths.observation_branch}")
    document = {**kernel_lineage.observation_metadata(paths, identity, digest.hexdigest()),
                FORK_KEY: record}
    name = kernel_lineage.OBSERVATION_METADATA_FILE
    (observations / name).write_bytes(_json_text(document))
    index = observed.index
    index.add(name)
    index.write()
    observed.create_commit("HEAD", author, author,
                           observation_init_subject(paths.branch) + "\n",
                           index.write_tree(), [])


def _remove(created: list[Path], places: tuple[Path, ...]) -> None:
    """Undo a partial birth: only what this call made, newest first (an ancestor folder
    we made may meanwhile hold someone else's work: it goes only if it is empty)."""
    for path in reversed(created):
        if path in places:
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.rmdir()

