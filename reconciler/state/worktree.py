"""Is a lineage's worktree exactly its branch head's tree? Read-only.

Rule: nothing here writes (not even the index, which libgit2's status would refresh):
git's own stat check is done by hand on the index file (``index_entries``, versions
2 and 3), and only what it cannot prove clean goes to libgit2's status, which is
exact. ``dirty`` answers with the paths that differ, or with the problem that the
worktree is not the lineage's (no ``.git`` pointer to its git dir).
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Iterable
from pathlib import Path

import pygit2

from reconciler.errors import with_host_remedy
from reconciler.kernel.base.config import LineagePaths
from reconciler.state.repos import READ_ERRORS, open_repo

__all__ = ["clean_as_listed", "dirty", "index_entries", "listing_of", "provably_clean",
           "tree_listing"]

_FAST_CLEAN_MAX_FILES = 20000


def _gitlink_target(worktree: Path) -> Path | None:
    """The git dir a worktree's ``.git`` (a ``gitdir:`` file or a folder) leads to."""
    dotgit = os.path.join(worktree, ".git")
    try:
        text = _read(dotgit, 4096).decode("utf-8")
    except IsADirectoryError:
        return Path(dotgit)
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    return Path(os.path.join(worktree, text.removeprefix("gitdir:").strip()))


def _read(path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the file at ``path`` (unbuffered: one open, one read)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _same_place(a: Path, b: Path) -> bool:
    return os.path.abspath(a) == os.path.abspath(b) or os.path.realpath(a) == os.path.realpath(b)


_ENTRY = struct.Struct(">10I20sH")  # ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size


def index_entries(data: bytes) -> tuple[list[tuple[str, int, int, int, int, bytes]],
                                         bytes | None] | None:
    """Entries (path, mtime s, mtime ns, mode, size, sha1) and the cached root tree id
    of a version 2/3 index; None for anything this reader does not handle."""
    if len(data) < 32 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3):
        return None
    entries = []
    offset = 12
    for _ in range(count):
        (_cs, _cn, ms, mns, _dev, _ino, mode, _uid, _gid, size, sha,
         flags) = _ENTRY.unpack_from(data, offset)
        header = 62
        if flags & 0x4000:  # extended flags (skip-worktree, intent-to-add): not handled
            return None
        if (flags >> 12) & 3:  # a conflict stage
            return None
        end = data.index(b"\0", offset + header)
        path = data[offset + header:end].decode("utf-8")
        entries.append((path, ms, mns, mode, size, sha))
        offset += (header + len(path.encode("utf-8")) + 8) & ~7
    root_tree: bytes | None = None
    while offset + 8 <= len(data) - 20:
        signature = data[offset:offset + 4]
        (length,) = struct.unpack_from(">I", data, offset + 4)
        body = data[offset + 8:offset + 8 + length]
        if signature == b"TREE" and body.startswith(b"\0"):
            line_end = body.index(b"\n")
            counts = body[1:line_end].split(b" ")
            if counts and int(counts[0]) >= 0:
                root_tree = body[line_end + 1:line_end + 21]
        offset += 8 + length
    return entries, root_tree


def _tree_entries(repo: pygit2.Repository, tree: pygit2.Tree) -> dict[str, tuple[int, bytes]]:
    """Every blob below ``tree``: path -> (mode, raw id). Iterative (trees may be deep)."""
    found: dict[str, tuple[int, bytes]] = {}
    pending: list[tuple[str, pygit2.Tree]] = [("", tree)]
    while pending:
        prefix, current = pending.pop()
        for entry in current:
            path = prefix + str(entry.name)
            if entry.filemode == pygit2.GIT_FILEMODE_TREE:
                sub = repo[entry.id]
                if not isinstance(sub, pygit2.Tree):
                    raise KeyError(path)
                pending.append((path + "/", sub))
            else:
                found[path] = (int(entry.filemode), bytes.fromhex(str(entry.id)))
    return found


def listing_of(entries: Iterable[tuple[str, int, bytes]]) -> str:
    """One digest of a tree's every blob: (path, mode, raw id), in path order."""
    digest = hashlib.sha256()
    for path, mode, sha in sorted(entries):
        digest.update(b"%o %s\0%s" % (mode, path.encode("utf-8", "surrogateescape"), sha))
    return digest.hexdigest()


def tree_listing(repo: pygit2.Repository, tree: pygit2.Tree) -> str:
    """``listing_of`` a tree (every blob below it)."""
    return listing_of((path, mode, sha) for path, (mode, sha) in _tree_entries(repo, tree).items())


def _worktree_files(worktree: Path) -> set[str] | None:
    """Every file and symlink under the worktree (not ``.git``); None past a size limit."""
    found: set[str] = set()
    stack = [(worktree, "")]
    while stack:
        folder, prefix = stack.pop()
        with os.scandir(folder) as listing:
            for item in listing:
                if not prefix and item.name == ".git":
                    continue
                if item.is_dir(follow_symlinks=False):
                    stack.append((Path(item.path), prefix + item.name + "/"))
                else:
                    found.add(prefix + item.name)
        if len(found) > _FAST_CLEAN_MAX_FILES:
            return None
    return found


def provably_clean(repo: pygit2.Repository | None, git_dir: Path, worktree: Path,
                   head: pygit2.Commit | None,
                   listed: tuple[str, str] | None = None) -> bool:
    """git's own stat check, read-only: True only when index == HEAD and the worktree
    matches the index (files whose stat is racy or absent are hashed). False means
    "cannot tell quickly"; the caller then asks libgit2's status, which is exact.

    Kept beside libgit2 because ``bench/index_bench.py`` shows libgit2 clearly slower
    where content must be compared: on the index the kernel writes after every
    generation (from a tree, no stat) and on racy entries, libgit2's status hashes
    each file on every call and, as observe never writes the index, never stops
    (about 2-4x slower than this at 5,000 files); and pygit2's ``Index`` exposes no
    stat data or cached tree, so this reader (``index_entries``, itself ~10x faster
    than ``pygit2.Index``) is needed to check at all. Where the recorded stat decides,
    libgit2 alone is about 2x faster, but it gives up on a worktree nested deeper than
    100 folders (``tests/kernel_generation/test_hostile.py``), which an organism may
    publish: so this check runs first in every case.
    """
    try:
        fd = os.open(os.path.join(git_dir, "index"), os.O_RDONLY | os.O_CLOEXEC)
        try:
            index_stat = os.fstat(fd)
            data = os.read(fd, index_stat.st_size + 1)
        finally:
            os.close(fd)
        parsed = index_entries(data)
        if parsed is None:
            return False
        entries, root_tree = parsed
        # (an untracked .gitattributes fails the file-set comparison below)
        if any(entry[0] == ".gitattributes" or entry[0].endswith("/.gitattributes")
               for entry in entries):
            return False
        if not _index_is_head(entries, root_tree, repo, head, listed):
            return False
        files = _worktree_files(worktree)
        if files is None or files != {entry[0] for entry in entries}:
            return False
        index_time = divmod(index_stat.st_mtime_ns, 1_000_000_000)
        base = str(worktree)
        for path, seconds, nanos, mode, size, sha in entries:
            target = f"{base}/{path}"
            info = os.lstat(target)
            if mode == 0o120000:
                if not stat.S_ISLNK(info.st_mode):
                    return False
                content = os.readlink(target).encode("utf-8")
            elif mode in (0o100644, 0o100755):
                if not stat.S_ISREG(info.st_mode) or bool(info.st_mode & 0o100) != (
                    mode == 0o100755
                ):
                    return False
                content = b""
            else:
                return False
            # An entry with no stat at all is one libgit2 wrote from a tree (the kernel's
            # index after every generation): like a racy one, its content decides.
            unknown = seconds == nanos == size == 0
            if not unknown and info.st_size & 0xFFFFFFFF != size:
                return False
            if not unknown and divmod(info.st_mtime_ns, 1_000_000_000) != (seconds, nanos):
                return False
            if unknown or (seconds, nanos) >= index_time or size == 0:  # compare the content
                if mode != 0o120000:
                    content = _read(target, info.st_size + 1)
                digest = hashlib.sha1(b"blob %d\0" % len(content) + content,
                                      usedforsecurity=False).digest()
                if digest != sha:
                    return False
        return True
    except (OSError, ValueError, KeyError, UnicodeDecodeError, struct.error):
        return False


def _index_is_head(entries: list[tuple[str, int, int, int, int, bytes]],
                   root_tree: bytes | None, repo: pygit2.Repository | None,
                   head: pygit2.Commit | None, listed: tuple[str, str] | None) -> bool:
    """The index's entries are the head's tree: its cached root tree is the head's, or
    its entries are the tree's blobs (read from ``repo``, or given as ``listed``: the
    head's tree id and ``listing_of`` its blobs)."""
    if listed is not None:
        tree, listing = listed
        return (root_tree is not None and root_tree.hex() == tree) or listing_of(
            (path, mode, sha) for path, _s, _n, mode, _z, sha in entries) == listing
    if repo is None or head is None:
        return False
    if root_tree is not None and root_tree.hex() == str(head.tree_id):
        return True
    expected = _tree_entries(repo, head.tree)
    return {path: (mode, sha) for path, _s, _n, mode, _z, sha in entries} == expected


def clean_as_listed(paths: LineagePaths, tree: str, listing: str) -> bool:
    """The worktree is provably its head's tree, known by the tree's id and listing
    (``tree_listing``) without opening the repository: its ``.git`` leads to the git dir
    and git's stat check holds (``provably_clean``). False: ask ``dirty``."""
    target = _gitlink_target(paths.worktree)
    if target is None or not _same_place(target, paths.git_dir):
        return False
    return provably_clean(None, paths.git_dir, paths.worktree, None, (tree, listing))


def dirty(paths: LineagePaths, repo: pygit2.Repository | None,
          head: pygit2.Commit | None) -> tuple[tuple[str, ...], str | None]:
    """The worktree's paths that differ from ``head`` (git dir ``repo``), sorted, and the
    problem (a ``partial-paths`` message) when it cannot be read as the lineage's."""
    target = _gitlink_target(paths.worktree)
    if target is None:
        return (), f"{paths.worktree} is not a worktree of {paths.git_dir} (no .git pointer)"
    if not _same_place(target, paths.git_dir):
        return (), f"{paths.worktree}/.git points to {target}, not {paths.git_dir}"
    if repo is not None and head is not None and provably_clean(
        repo, paths.git_dir, paths.worktree, head
    ):
        return (), None
    opened = open_repo(paths.worktree)
    if opened is None:
        return (), f"{paths.worktree}: cannot open it as a worktree"
    try:
        status = opened.raw.status()
    except READ_ERRORS as error:
        return (), with_host_remedy(f"{paths.worktree}: cannot read the worktree: {error}")
    clean = (pygit2.enums.FileStatus.CURRENT, pygit2.enums.FileStatus.IGNORED)
    return tuple(sorted(path for path, flags in status.items() if flags not in clean)), None
