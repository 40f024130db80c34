"""The audit's integrity pass: every object reachable from a branch reads whole.

Rule: pure reading. An object reads whole when it inflates completely and its
content hashes to its id, as ``git fsck`` checks it. Loose objects are read
here, with Python's zlib, and never handed to libgit2 unchecked: libgit2 1.9
loops forever on a truncated loose object (libgit2#7342, fixed upstream after
the releases pygit2 bundles), and a truncated loose object is exactly what a
host crash leaves. Packed objects are read by libgit2. Commits and trees are
parsed from the checked bytes, so the pass never reads an object twice.

Iterative (history and trees may be deep); memory is the set of ids seen.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pygit2

__all__ = ["ObjectStore", "damage_message", "readable", "unreadable_newest",
           "unreadable_reachable", "unreadable_since"]

_GITLINK = 0o160000
_TREE = 0o040000
_KINDS = {pygit2.enums.ObjectType.COMMIT: b"commit", pygit2.enums.ObjectType.TREE: b"tree",
          pygit2.enums.ObjectType.BLOB: b"blob", pygit2.enums.ObjectType.TAG: b"tag"}


class ObjectStore:
    """One repository's objects, each read and checked whole (``load``)."""

    def __init__(self, repo: pygit2.Repository, *, remember: bool = False) -> None:
        self.repo = repo
        self.objects = os.path.join(repo.path, "objects")
        self.remembered: dict[bytes, tuple[bytes, bytes] | None] | None = {} if remember else None

    def load(self, oid: bytes) -> tuple[bytes, bytes] | None:
        """(kind, content), or None when the object is missing or does not read whole."""
        if self.remembered is None:
            return self._load(oid)
        if oid not in self.remembered:
            self.remembered[oid] = self._load(oid)
        return self.remembered[oid]

    def _load(self, oid: bytes) -> tuple[bytes, bytes] | None:
        hexid = oid.hex()
        try:
            with open(os.path.join(self.objects, hexid[:2], hexid[2:]), "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return self._packed(oid)
        except OSError:
            return None
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(data)
        except zlib.error:
            return None
        if not inflater.eof or inflater.unused_data:
            return None  # truncated, or followed by garbage
        algorithm = hashlib.sha1 if len(oid) == 20 else hashlib.sha256
        if algorithm(raw, usedforsecurity=False).digest() != oid:
            return None
        header, _, content = raw.partition(b"\0")
        kind, _, size = header.partition(b" ")
        if not size.isdigit() or int(size) != len(content):
            return None
        return kind, content

    def _packed(self, oid: bytes) -> tuple[bytes, bytes] | None:
        try:  # libgit2 checks a packed object's content against its id
            kind, content = self.repo.odb.read(pygit2.Oid(raw=oid))
        except (pygit2.GitError, ValueError, KeyError, OSError):
            return None
        name = _KINDS.get(kind)
        return None if name is None else (name, bytes(content))


def readable(repo: pygit2.Repository, oid: pygit2.Oid) -> pygit2.Object | None:
    """The object through libgit2, or None when it is missing or does not read whole
    (checked first, so libgit2 never meets a truncated loose object)."""
    if ObjectStore(repo).load(oid.raw) is None:
        return None
    try:
        return repo.get(oid)
    except (pygit2.GitError, ValueError, KeyError, OSError):
        return None


def _commit_links(content: bytes, width: int) -> tuple[bytes, list[bytes]]:
    """A commit's tree and parents, from its header lines."""
    tree: bytes | None = None
    parents: list[bytes] = []
    for line in content.split(b"\n\n", 1)[0].split(b"\n"):
        key, _, value = line.partition(b" ")
        if key == b"tree" and tree is None:
            tree = bytes.fromhex(value.decode("ascii"))
        elif key == b"parent":
            parents.append(bytes.fromhex(value.decode("ascii")))
    if tree is None or any(len(oid) != width for oid in (tree, *parents)):
        raise ValueError("commit: no tree, or a malformed id")
    return tree, parents


def _tree_entries(content: bytes, width: int) -> Iterator[tuple[int, bytes, bytes]]:
    """(mode, name, id) of each entry of a tree."""
    position, end = 0, len(content)
    while position < end:
        space = content.index(b" ", position)
        nul = content.index(b"\0", space)
        oid = content[nul + 1:nul + 1 + width]
        if len(oid) != width:
            raise ValueError("tree: truncated entry")
        yield int(content[position:space], 8), content[space + 1:nul], oid
        position = nul + 1 + width


def unreadable_reachable(repo: pygit2.Repository, head: pygit2.Oid,
                         checked_whole: Callable[[bytes, bytes], bool] | None = None
                         ) -> list[bytes]:
    """Read every object reachable from ``head`` -- all parents, trees and blobs -- once
    each; the ids of those that do not read whole.

    ``checked_whole(name, id)``, for an entry of a commit's root tree: True when that
    tree needs only to read whole, its entries being walked elsewhere (a version of the
    observations' ``generations/`` that is a prefix of the newest one).
    """
    store = ObjectStore(repo)
    width = len(head.raw)
    seen: set[bytes] = set()
    stack: list[tuple[bytes, bool]] = [(head.raw, False)]
    unreadable: list[bytes] = []
    while stack:
        oid, root = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        loaded = store.load(oid)
        if loaded is None:
            unreadable.append(oid)
            continue
        kind, content = loaded
        try:
            if kind == b"commit":
                tree, parents = _commit_links(content, width)
                stack.extend((parent, False) for parent in parents)
                stack.append((tree, True))
            elif kind == b"tree":
                for mode, name, entry in _tree_entries(content, width):
                    if mode == _GITLINK or entry in seen:
                        continue
                    if root and checked_whole is not None and checked_whole(name, entry):
                        seen.add(entry)
                        if store.load(entry) is None:
                            unreadable.append(entry)
                        continue
                    stack.append((entry, False))
        except ValueError:  # it hashes to its id, but git could not parse it either
            unreadable.append(oid)
    return unreadable


def unreadable_since(repo: pygit2.Repository, head: pygit2.Oid, audited: pygit2.Oid,
                     store: ObjectStore | None = None) -> list[bytes]:
    """The objects reachable from ``head`` but not from ``audited`` (whose every object an
    earlier audit read), each read once; the ids of those that do not read whole.

    Linear in what is new: a commit not reachable from ``audited`` is read, and its tree
    only where it differs from its first parent's (an entry equal to the parent's is
    reachable from the parent: read by the earlier audit, or by this walk, which reaches
    every new commit). A root commit's tree is read whole. The walk stops at ``audited``;
    at a merge, at any commit of ``audited``'s first-parent history.
    """
    store = store or ObjectStore(repo)
    width = len(head.raw)
    old = {audited.raw}
    seen: set[bytes] = set()
    unreadable: list[bytes] = []
    stack = [head.raw]
    while stack:
        oid = stack.pop()
        if oid in old or oid in seen:
            continue
        seen.add(oid)
        loaded = store.load(oid)
        try:
            if loaded is None or loaded[0] != b"commit":
                raise ValueError("not a commit")
            tree, parents = _commit_links(loaded[1], width)
            if len(parents) > 1 and len(old) == 1:
                old = _first_parents(store, audited.raw, width)
            stack.extend(parents)
            base = None
            if parents:
                parent = store.load(parents[0])
                base = _commit_links(parent[1], width)[0] if parent and \
                    parent[0] == b"commit" else None
            unreadable += _changes_unreadable(store, tree, base, seen, width)
        except ValueError:
            unreadable.append(oid)
    return unreadable


def _first_parents(store: ObjectStore, head: bytes, width: int) -> set[bytes]:
    ids = {head}
    loaded = store.load(head)
    while loaded is not None and loaded[0] == b"commit":
        parents = _commit_links(loaded[1], width)[1]
        if not parents or parents[0] in ids:
            break
        ids.add(parents[0])
        loaded = store.load(parents[0])
    return ids


def _changes_unreadable(store: ObjectStore, tree: bytes, base: bytes | None,
                        seen: set[bytes], width: int) -> list[bytes]:
    """Read ``tree`` and what in it differs from ``base`` (None: all of it)."""
    unreadable: list[bytes] = []
    stack: list[tuple[bytes, bytes | None]] = [(tree, base)]
    while stack:
        oid, before_id = stack.pop()
        if oid == before_id or oid in seen:
            continue
        seen.add(oid)
        loaded = store.load(oid)
        if loaded is None or loaded[0] != b"tree":
            unreadable.append(oid)
            continue
        before: dict[bytes, tuple[int, bytes]] = {}
        earlier = store.load(before_id) if before_id is not None else None
        content = loaded[1]
        try:
            if earlier is not None and earlier[0] == b"tree":
                if content.startswith(earlier[1]):  # entries appended (the observations'):
                    content = content[len(earlier[1]):]  # names sorting after every old one
                else:
                    before = {name: (mode, entry)
                              for mode, name, entry in _tree_entries(earlier[1], width)}
            for mode, name, entry in _tree_entries(content, width):
                old_mode, old_entry = before.get(name, (0, b""))
                if mode == _GITLINK or old_entry == entry:
                    continue
                if mode == _TREE:
                    stack.append((entry, old_entry if old_mode == _TREE else None))
                elif entry not in seen:
                    seen.add(entry)
                    if store.load(entry) is None:
                        unreadable.append(entry)
        except ValueError:
            unreadable.append(oid)
    return unreadable


def unreadable_newest(repo: pygit2.Repository, head: pygit2.Oid) -> list[bytes]:
    """What the newest commit added (against its first parent) that does not read whole:
    the objects a host crash during the last generation can have left truncated. Cheap
    (the new objects only), so that readers can check before libgit2 reads anything."""
    store = ObjectStore(repo, remember=True)  # the few objects this reads, each once
    loaded = store.load(head.raw)
    if loaded is None or loaded[0] != b"commit":
        return [head.raw]
    try:
        parents = _commit_links(loaded[1], len(head.raw))[1]
    except ValueError:
        return [head.raw]
    if not parents:
        return unreadable_reachable(repo, head)
    return unreadable_since(repo, head, pygit2.Oid(raw=parents[0]), store)


def damage_message(place: Path, branch: str, oid: bytes) -> str:
    return (f"{place}: object {oid.hex()} of the newest commit on {branch} is missing or "
            "does not read whole (truncated or corrupt, as a host crash can leave it); restore "
            "it from a clone or a backup (`git fsck` names every such object)")
