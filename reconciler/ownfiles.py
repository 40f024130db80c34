"""The files and folders ouro writes above the kernel: never through a link, never over
something that is not a regular file, its own folders private.

Rule: every file ouro writes beside lineages, stores, specs or in the state dir goes
through here, and this is the one home of an atomic write:

- a file is written whole or not at all: a temporary file made with ``O_EXCL |
  O_NOFOLLOW`` in the target's own folder (opened once as a folder descriptor), then
  renamed over the target within that folder;
- a target that exists and is not a regular file (a device such as ``/dev/full``, a
  FIFO, a folder, a link) is refused, never replaced;
- a lock or a record ouro reopens is opened with ``O_NOFOLLOW`` and must be a regular
  file (``open_regular``);
- every cache and record ouro reads back (summaries, observed caches, audit records,
  stop, lock-holder and controller-status records, the kernel store's entries and ref
  files) is read by ``read_regular``: opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO
  never blocks), ``fstat``'d after the open, and read only when it is a regular file no
  larger than the caller's documented bound; anything else (a link, ``/dev/zero``, a FIFO,
  a folder, a 4 GiB sparse file) is treated as absent — a cache is rebuilt, a record is
  not believed — never read and never an error. With ``own_folder`` the file's folder (a
  cache folder of ouro's own) must not be a link either;
- a cache folder of ouro's own that is a link is replaced by a private folder
  (``private_folder(..., replace_link=True)``), the link's target untouched, and a cache is
  written with ``write_atomic(..., own_folder=True)``: never through a linked folder;
- the folders ouro keeps for itself (the state dir, its caches, the kernel store, Slurm
  job folders) are made 0700 whatever the umask, and one of them that its group or
  others can write, or that another user owns, is refused naming its mode and the fix,
  as ssh refuses a shared ``~/.ssh`` (``private_folder``, ``check_private``).

May import: ``reconciler.errors``. Nothing else of reconciler (every layer above the
kernel uses it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from reconciler.errors import PathRefused

__all__ = ["check_private", "kind_of", "open_regular", "private_folder", "read_regular",
           "write_atomic"]

PRIVATE_MODE = 0o700
_SHARED_BITS = stat.S_IWGRP | stat.S_IWOTH


def kind_of(mode: int) -> str:
    """What a file of this mode is, for messages ("a character device")."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def _trusted_owner(uid: int) -> bool:
    return uid in (os.geteuid(), 0)  # as ssh: the user's own, or root's


def check_private(path: Path, what: str, *, own: bool = False) -> None:
    """Refuse ``path`` (a folder ouro keeps for itself) if others can write it or another
    user owns it. Nothing to check if it does not exist (yet) or is not a folder (whoever
    opens it as one fails). A link to a folder is followed (a state dir may be one the
    user made): the folder it names is checked; with ``own`` (a cache folder, never a
    link) a link is not followed: nothing is read or written through it."""
    try:
        info = os.stat(path, follow_symlinks=not own)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as error:
        raise PathRefused(f"ouro: {what} {path} cannot be read ({error.strerror}): "
                          "check its permissions") from error
    if not stat.S_ISDIR(info.st_mode):
        return
    if not _trusted_owner(info.st_uid):
        raise PathRefused(
            f"ouro: {what} {path} is owned by uid {info.st_uid}, not by this user "
            f"(uid {os.geteuid()}): whoever owns it could plant caches, locks or job results "
            f"that ouro would trust; use a folder of your own (--state-dir, OURO_STATE_DIR) "
            f"or `chown {os.geteuid()} {path}`")
    shared = info.st_mode & _SHARED_BITS
    if shared:
        who = {stat.S_IWGRP: "group-writable", stat.S_IWOTH: "world-writable"}.get(
            shared, "group- and world-writable")
        raise PathRefused(
            f"ouro: {what} {path} is {who} (mode {stat.S_IMODE(info.st_mode):04o}): others "
            "could plant caches, locks or job results there that ouro would trust; run "
            f"`chmod go-w {path}` (ouro makes its folders 0700; like ssh with ~/.ssh, it "
            "refuses one that others can write)")


def private_folder(path: Path, what: str, *, replace_link: bool = False) -> Path:
    """``path``, made (with its missing parents) 0700 whatever the umask if missing, and
    checked (``check_private``). OSError if it cannot be made.

    ``replace_link``: ``path`` is a folder of ouro's own (a cache folder); a link there is
    removed (its target untouched) and a private folder made in its place."""
    path = Path(os.path.abspath(path))
    if replace_link and os.path.islink(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    missing: list[Path] = []
    current = path
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, PRIVATE_MODE)
        except FileExistsError:
            continue  # another process made it: checked below like any existing one
        os.chmod(folder, PRIVATE_MODE)  # a umask cannot add bits, but it can take 0700's
    check_private(path, what)
    return path


def open_regular(path: Path, flags: int, mode: int = 0o600, *, what: str) -> int:
    """A descriptor of the regular file at ``path`` (``flags`` may create it), opened
    without following a link; a link, a FIFO, a device or a folder there is refused."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise PathRefused(
                f"ouro: {what} {path} is a symbolic link: ouro never writes through one; "
                "remove it (someone may have planted it to redirect the write)") from error
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise PathRefused(f"ouro: {what} {path} is {kind_of(info.st_mode)}, not a regular "
                          "file: remove it (ouro never writes to one)")
    os.set_blocking(fd, True)
    return fd


_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO, errno.EISDIR})


def read_regular(path: Path | str, limit: int, *, head: int | None = None,
                 own_folder: bool = False) -> bytes | None:
    """The bytes of the regular file at ``path`` (see the module's rule), or None when it is
    absent, a link, not a regular file, or larger than ``limit`` bytes.

    ``head``: only its first ``head`` bytes are read (a header line), the size still
    bounded by ``limit``. ``own_folder``: a link in place of the file's folder counts as
    absent too. Any other OSError (a permission refused) is raised.
    """
    folder, name = os.path.split(os.path.abspath(path))
    nofollow = os.O_NOFOLLOW if own_folder else 0
    try:
        parent = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | nofollow)
    except OSError as error:
        if error.errno in _ABSENT:
            return None
        raise
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=parent)
    except OSError as error:
        if error.errno in _ABSENT:
            return None
        raise
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        want = min(limit, head) if head is not None else limit
        chunks: list[bytes] = []
        size = 0
        while size <= want:  # read to the end, never past the bound (a file that grew)
            chunk = os.read(fd, min(1 << 20, want + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if head is None and size > limit:
            return None
        return b"".join(chunks)[:want]
    finally:
        os.close(fd)


def _refuse_unless_regular(parent: int, name: str, target: Path, what: str) -> None:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise PathRefused(f"ouro: {what} {target} exists and is {kind_of(info.st_mode)}, not a "
                          "regular file: ouro never replaces it; name another file")


def write_atomic(target: Path, data: bytes, *, what: str, mode: int = 0o600,
                 follow: bool = False, sync: bool = False, own_folder: bool = False) -> None:
    """Write ``data`` to ``target`` whole or not at all (see the module's rule).

    ``follow``: ``target`` is a path a user named (``-o``): links in it are resolved
    first, and the file they lead to must be a regular file or absent. Otherwise the
    last component is never followed. ``own_folder``: the target's folder is one of
    ouro's own (a cache folder) and is never a link (ELOOP if it is). ``mode`` is
    subject to the umask. Raises ``PathRefused`` for a target that is not a regular
    file, OSError otherwise.
    """
    target = Path(os.path.realpath(target) if follow else os.path.abspath(target))
    parent = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
                     | (os.O_NOFOLLOW if own_folder else 0))
    try:
        _refuse_unless_regular(parent, target.name, target, what)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            temp = f".{target.name[:64]}.{secrets.token_hex(6)}.tmp"
            try:
                fd = os.open(temp, flags, mode, dir_fd=parent)
                break
            except FileExistsError:
                continue  # a name taken (or planted): another one
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                if sync:
                    os.fsync(out.fileno())
            _refuse_unless_regular(parent, target.name, target, what)
            os.rename(temp, target.name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException as error:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
            if isinstance(error, OSError) and error.filename is None:  # name the target
                raise OSError(error.errno, error.strerror, str(target)) from error
            raise
    finally:
        os.close(parent)
