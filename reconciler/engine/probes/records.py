"""Writing probe records: one commit per record on ``probes/<lineage branch>``.

Rule: a record is written whole or not at all: its blobs and trees first, then one
commit, then the branch moves to it (libgit2 writes the ref through a lock file and
a rename), so a crash leaves the record or nothing. Writers of one observation
repository in this process take turns (``_LOCKS``); other processes are kept out by
the lineage's apply lock, which every measuring apply holds. So a lock file of the
probes branch found by a writer is a killed writer's leftover (a kill between libgit2's
lock and its rename): it is removed, or the branch could never move again. Layout:
``reconciler.state.probes``.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pygit2

from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.probes import ProbeFiles
from reconciler.state import probes as stored

__all__ = ["write_record"]

_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()
_SIGNATURE = ("ouro", "ouro@invalid")
_BLOB = pygit2.enums.FileMode.BLOB
_TREE = pygit2.enums.FileMode.TREE


def _lock(path: Path) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(str(path.resolve()), threading.Lock())


def _json_blob(repo: pygit2.Repository, value: Any) -> pygit2.Oid:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return repo.create_blob(text.encode("utf-8"))


def _files_tree(repo: pygit2.Repository, entries: list[tuple[str, bool, bytes]]) -> pygit2.Oid:
    builder = repo.TreeBuilder()
    folders: dict[str, list[tuple[str, bool, bytes]]] = {}
    for path, executable, data in entries:
        head, _, rest = path.partition("/")
        if rest:
            folders.setdefault(head, []).append((rest, executable, data))
        else:
            mode = pygit2.enums.FileMode.BLOB_EXECUTABLE if executable else _BLOB
            builder.insert(head, repo.create_blob(data), mode)
    for name, inner in folders.items():
        builder.insert(name, _files_tree(repo, inner), _TREE)
    return builder.write()


def _subtree(repo: pygit2.Repository, tree: pygit2.Tree | None,
             name: str) -> pygit2.Tree | None:
    if tree is None or name not in tree:
        return None
    found = repo.get(tree[name].id)
    return found if isinstance(found, pygit2.Tree) else None


def _digest_tree(repo: pygit2.Repository, old: pygit2.Tree | None, probe: dict[str, Any],
                 files: ProbeFiles, generation: int, record: dict[str, Any]) -> pygit2.Oid:
    builder = repo.TreeBuilder(old) if old is not None else repo.TreeBuilder()
    if old is None or stored.PROBE_FILE not in old:
        builder.insert(stored.PROBE_FILE, _json_blob(repo, probe), _BLOB)
        if files.entries:
            written = _files_tree(repo, list(files.entries))
            if str(written) != files.tree_id():
                raise RuntimeError("the probe's files wrote another tree than their digest's")
            builder.insert(stored.FILES, written, _TREE)
    generations = _subtree(repo, old, stored.GENERATIONS)
    inner = repo.TreeBuilder(generations) if generations is not None else repo.TreeBuilder()
    inner.insert(stored.record_name(generation), _json_blob(repo, record), _BLOB)
    builder.insert(stored.GENERATIONS, inner.write(), _TREE)
    return builder.write()


def write_record(paths: LineagePaths, probe: dict[str, Any], files: ProbeFiles,
                 generation: int, record: dict[str, Any]) -> str:
    """Commit one record (``probe``: the digest's probe.json, with ``digest``); returns the
    new commit id. ``ValueError`` if that generation already has a record at that digest."""
    digest = probe["digest"]
    with _lock(paths.observations):
        repo = pygit2.Repository(str(paths.observations),
                                 pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        ref_name = f"refs/heads/{stored.probe_branch(paths.branch)}"
        _remove_leftover_lock(os.path.join(repo.path, ref_name + ".lock"))
        ref = repo.references.get(ref_name)
        parent = repo.get(ref.resolve().target) if ref is not None else None
        root = parent.peel(pygit2.Tree) if isinstance(parent, pygit2.Commit) else None
        old = _subtree(repo, root, digest)
        done = _subtree(repo, old, stored.GENERATIONS)
        if done is not None and stored.record_name(generation) in done:
            raise ValueError(f"generation {generation} already has a record at {digest[:12]}")
        top = repo.TreeBuilder(root) if root is not None else repo.TreeBuilder()
        top.insert(digest, _digest_tree(repo, old, probe, files, generation, record), _TREE)
        now = int(time.time())
        signature = pygit2.Signature(*_SIGNATURE, now, 0)
        message = f"probe {probe.get('name')} {digest[:12]}: gen {generation}\n"
        oid = repo.create_commit(None, signature, signature, message, top.write(),
                                 [parent.id] if isinstance(parent, pygit2.Commit) else [])
        if ref is None:
            repo.references.create(ref_name, oid)
        else:
            ref.set_target(oid, message.strip())
        return str(oid)


def _remove_leftover_lock(path: str) -> None:
    """Remove a killed writer's lock file of the probes branch (see the module's rule); a
    folder or anything else there is left for libgit2 to refuse, by name."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(found.st_mode) or stat.S_ISLNK(found.st_mode):
        os.unlink(path)
