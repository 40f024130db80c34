"""The lineage worktree on the host: read it as it is, and make it exactly a tree.

Trusted harness; never mounted into a generation. Rules:

- the worktree itself is opened without following a symlink: a worktree replaced by
  a symlink (to a victim's folder, say) is refused, never read nor written through;
  below it every step is relative to a directory descriptor, and no name is followed;
- bytes are git's blobs, exactly: no ``.gitattributes`` (``text``, ``eol``, ``ident``,
  ``filter``), no ``core.autocrlf`` or ``core.symlinks`` has a say (libgit2's checkout
  would apply them, and its workdir iterator also gives up below 100 levels);
- nothing here recurses on depth: directories are visited from an explicit list,
  each with one descriptor open at a time.

A top-level ``.git`` (the pointer file to the separate git dir) and any entry named
``.git`` in any case are git's own, never content: read as absent, never written or
removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pygit2

from ..base.errors import DamageError, PreflightError
from ..base.gitnames import refused

__all__ = ["FileEntry", "open_worktree", "read_worktree", "write_worktree"]

FILE = pygit2.GIT_FILEMODE_BLOB
EXECUTABLE = pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
LINK = pygit2.GIT_FILEMODE_LINK
TREE = pygit2.GIT_FILEMODE_TREE
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class FileEntry:
    """One blob to place in a tree: a regular file or a symlink."""

    path: str
    kind: Literal["file", "symlink"]
    data: bytes
    executable: bool = False


def _gits_own(name: str) -> bool:
    return name.casefold() == ".git"


def open_worktree(worktree: Path) -> int:
    """A descriptor of the worktree directory itself, never through a symlink."""
    try:
        return os.open(worktree, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise DamageError(
                f"kernel: the worktree {worktree} is not a directory (a symlink or a file "
                "replaced it): refused, it is never followed; put the lineage's own worktree "
                "back (`git -C <git dir> worktree` has it) before extending the lineage",
                reason="damaged",
            ) from exc
        raise


@contextlib.contextmanager
def _directory(root: int, relative: str) -> Iterator[int]:
    fd = root if not relative else os.open(relative, _DIR_FLAGS, dir_fd=root)
    try:
        yield fd
    finally:
        if fd != root:
            os.close(fd)


def _read_regular(name: str, directory: int, shown: str) -> bytes:
    """A regular file's bytes; one swapped for a FIFO or symlink meanwhile is refused."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=directory)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PreflightError(f"kernel: {shown!r} changed type while being read")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_worktree(worktree: Path) -> Iterator[FileEntry]:
    """Every file and symlink of the worktree, as it is now (whatever .gitignore says)."""
    root = open_worktree(worktree)
    try:
        pending = [""]
        while pending:
            relative = pending.pop()
            with _directory(root, relative) as fd:
                for item in sorted(os.scandir(fd), key=lambda item: item.name):
                    yield from _read_item(item, fd, relative, pending)
    finally:
        os.close(root)


def _read_item(
    item: os.DirEntry[str], fd: int, relative: str, pending: list[str]
) -> Iterator[FileEntry]:
    name = item.name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PreflightError(
            f"kernel: {relative + name!r} in the worktree has a name that is not UTF-8: rename it"
        ) from exc
    if _gits_own(name):
        return
    path = relative + name
    mode = os.lstat(name, dir_fd=fd).st_mode
    if refused(name, symlink=stat.S_ISLNK(mode)):
        raise PreflightError(
            f"kernel: {path!r} in the worktree is a name git refuses in a tree (a disguised "
            ".git): rename or remove it"
        )
    if stat.S_ISLNK(mode):
        yield FileEntry(path, "symlink", os.fsencode(os.readlink(name, dir_fd=fd)))
    elif stat.S_ISDIR(mode):
        pending.append(path + "/")
    elif stat.S_ISREG(mode):
        yield FileEntry(path, "file", _read_regular(name, fd, path), bool(mode & stat.S_IXUSR))
    else:
        raise PreflightError(
            f"kernel: {path} in the worktree is neither a file, a directory nor a symlink: "
            "remove it"
        )


# ---------------------------------------------------------------- writing


def _remove(parent: int, name: str) -> None:
    """Remove ``name`` (a directory with all below it) from ``parent``, iteratively."""
    if not stat.S_ISDIR(os.lstat(name, dir_fd=parent).st_mode):
        os.unlink(name, dir_fd=parent)
        return
    pending: list[tuple[str, bool]] = [(name, False)]
    while pending:
        relative, emptied = pending.pop()
        if emptied:
            os.rmdir(relative, dir_fd=parent)
            continue
        pending.append((relative, True))
        with _directory(parent, relative) as fd:
            for item in list(os.scandir(fd)):
                if item.is_dir(follow_symlinks=False):
                    pending.append((f"{relative}/{item.name}", False))
                else:
                    os.unlink(item.name, dir_fd=fd)


def _write_file(fd: int, name: str, data: bytes, mode: int) -> None:
    """A new file beside ``name``, then renamed over it: readers see old or new bytes."""
    temp = f".ouro-{secrets.token_hex(6)}"
    out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                  mode, dir_fd=fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
            os.fchmod(out, mode)
        finally:
            os.close(out)
        os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=fd)
        raise


class _StatEntry(pygit2.IndexEntry):
    """An index entry that carries the stat data of the file just written, as git's own
    checkout records it, so that ``git status`` (and ouro's fast clean check) can trust it
    without re-reading. pygit2 has no public setter for these fields."""

    def __init__(self, path: str, oid: pygit2.Oid, mode: int, info: os.stat_result) -> None:
        super().__init__(path, oid, pygit2.enums.FileMode(mode))
        self.info = info

    def _to_c(self):  # type: ignore[no-untyped-def]
        centry, keep = super()._to_c()
        info = self.info
        centry.ctime.seconds, centry.ctime.nanoseconds = divmod(info.st_ctime_ns, 10**9)
        centry.mtime.seconds, centry.mtime.nanoseconds = divmod(info.st_mtime_ns, 10**9)
        centry.ino = info.st_ino & 0xFFFFFFFF
        centry.uid, centry.gid = info.st_uid, info.st_gid
        centry.file_size = info.st_size & 0xFFFFFFFF
        return centry, keep


def _same(fd: int, name: str, kind: int, data: bytes, mode: int) -> bool:
    """Does the existing entry ``name`` already hold exactly this?"""
    try:
        info = os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    if kind == LINK:
        return stat.S_ISLNK(info.st_mode) and os.fsencode(os.readlink(name, dir_fd=fd)) == data
    if not stat.S_ISREG(info.st_mode) or info.st_size != len(data):
        return False
    if bool(info.st_mode & stat.S_IXUSR) != (mode == EXECUTABLE):
        return False
    return _read_regular(name, fd, name) == data


def write_worktree(
    repo: pygit2.Repository,
    worktree: Path,
    tree: pygit2.Tree,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Make the worktree and index exactly ``tree``: untracked and ignored files go too.

    ``progress(path)`` is called after each path written. OSError and pygit2.GitError
    propagate (the caller names the failure)."""
    root = open_worktree(worktree)
    entries: list[_StatEntry] = []
    try:
        pending: list[tuple[str, pygit2.Oid]] = [("", tree.id)]
        while pending:
            relative, tree_id = pending.pop()
            subtree = repo[tree_id]
            assert isinstance(subtree, pygit2.Tree)
            with _directory(root, relative) as fd:
                _sync_directory(repo, fd, relative, subtree, pending, entries, progress)
    finally:
        os.close(root)
    index = repo.index
    index.clear()
    for entry in entries:
        index.add(entry)
    index.write()


def _sync_directory(
    repo: pygit2.Repository,
    fd: int,
    relative: str,
    tree: pygit2.Tree,
    pending: list[tuple[str, pygit2.Oid]],
    entries: list[_StatEntry],
    progress: Callable[[str], None] | None,
) -> None:
    wanted = {item.name: item for item in tree if item.name is not None}
    for found in list(os.scandir(fd)):
        if _gits_own(found.name):
            continue
        want = wanted.get(found.name)
        if want is None or (want.filemode == TREE) != found.is_dir(follow_symlinks=False):
            _remove(fd, found.name)
    for name, item in sorted(wanted.items()):
        path = relative + name
        if item.filemode == TREE:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fd)
            pending.append((path + "/", item.id))
            continue
        if item.filemode not in (FILE, EXECUTABLE, LINK):
            continue  # a gitlink (submodule) has no bytes of this tree
        blob = repo[item.id]
        assert isinstance(blob, pygit2.Blob)
        data = blob.data
        if not _same(fd, name, item.filemode, data, item.filemode):
            with contextlib.suppress(FileNotFoundError):
                _remove(fd, name)
            if item.filemode == LINK:
                os.symlink(os.fsdecode(data), name, dir_fd=fd)
            else:
                _write_file(fd, name, data, 0o755 if item.filemode == EXECUTABLE else 0o644)
            if progress is not None:
                progress(path)
        info = os.lstat(name, dir_fd=fd)
        entries.append(_StatEntry(path, item.id, item.filemode, info))
