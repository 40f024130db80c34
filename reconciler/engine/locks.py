"""One apply per lineage at a time: an exclusive lock beside the lineage's git dir.

The lock is an ``flock`` on ``<git dir>.ouro-lock``, a sibling of the git dir so
that it exists before the lineage does (a ``create`` is locked too). The kernel
drops an ``flock`` when its holder dies, so a lock left by a killed apply is
simply free again: taking it over needs no guesswork. The holder writes who it
is (pid, host, start time, command) into ``<git dir>.ouro-lock.json`` so that a
waiting apply can name it (those names, and the read-only probe with which plan and
status name the holder, live in ``reconciler.state.holders``).

An apply that created nothing (refused, or stopped before the birth) leaves
nothing behind: on release, while still holding the lock, it removes the lock
file if none of the lineage's places exist, or if it made the file itself and
says it changed nothing (``untouched``: a refused lineage, e.g. another
instrument's, is left exactly as it was found). That unlink cannot let two applies
in at once: a waiter that had opened the old file gets the lock on an inode no
longer at the path, so every acquirer, once locked, checks that the path is
still the file it locked, and starts again on the new one if not. Only the
holder unlinks, and only while it holds the lock.

Neither file is ever reached through a link: the lock is opened with ``O_NOFOLLOW``
and must be a regular file, the holder record is written atomically beside it
(``reconciler.ownfiles``); a link, a FIFO, a device or a folder at either path is a
refusal naming it (a link planted there would otherwise have apply, as root, create or
overwrite whatever it names).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from reconciler.errors import LockError, PathRefused, host_fault
from reconciler.ownfiles import open_regular, write_atomic
from reconciler.state.holders import Holder, holder_path, lock_path, read_holder

__all__ = ["Holder", "LineageLock", "holder_path", "lock_path", "read_holder"]


_POLL_FIRST, _POLL_MAX = 0.01, 0.25  # seconds between attempts on a held lock


def _same_file(fd: int, path: Path) -> bool:
    """Is ``path`` (still) the file open as ``fd``?"""
    try:
        here, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


class LineageLock:
    """Context manager: hold a lineage for the whole of an apply.

    ``places`` are the lineage's three places: when none of them exists at release,
    the lock file is removed too (the apply created nothing). ``timeout`` < 0 waits
    for ever; 0 tries once.
    """

    def __init__(self, name: str, git_dir: Path, *, timeout: float,
                 places: Sequence[Path] = ()) -> None:
        self.name = name
        self.git_dir = git_dir
        self.timeout = timeout
        self.places = tuple(places) or (git_dir,)
        self.untouched = False  # the holder sets it when it changed nothing of the lineage
        self._fd: int | None = None
        self._made_file = False

    @property
    def path(self) -> Path:
        return lock_path(self.git_dir)

    def _try_once(self) -> int | None:
        """The locked fd of the file now at the path, or None if another holds it."""
        while True:
            self._made_file = not os.path.lexists(self.path)
            fd = open_regular(self.path, os.O_RDWR | os.O_CREAT, 0o644,
                              what=f"the lock of lineage {self.name}")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            except OSError:
                os.close(fd)
                raise
            if _same_file(fd, self.path):
                return fd
            os.close(fd)  # its holder created nothing and removed it: lock the new one

    def acquire(self) -> None:
        try:
            self.git_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise LockError(
                f"ouro: lineage {self.name}: cannot create {self.git_dir.parent} for its lock "
                f"({error.strerror}): check the storage path and its permissions"
            ) from error
        started = time.monotonic()
        pause = _POLL_FIRST
        while True:
            try:
                fd = self._try_once()
            except OSError as error:
                raise LockError(
                    f"ouro: lineage {self.name}: cannot lock {self.path} ({error.strerror})"
                ) from error
            if fd is not None:
                break
            waited = time.monotonic() - started
            if self.timeout >= 0 and waited >= self.timeout:
                holder = read_holder(self.git_dir)
                raise LockError(
                    f"ouro: lineage {self.name} is held by another apply ({holder.describe()}); "
                    f"waited {waited:.0f}s (--lock-timeout {self.timeout:g}s): "
                    "let it finish, or raise --lock-timeout"
                )
            left = self.timeout - waited if self.timeout >= 0 else pause
            time.sleep(max(0.0, min(pause, left)))
            pause = min(pause * 2, _POLL_MAX)
        self._fd = fd
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(
                os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv)
            ),
        }
        try:
            write_atomic(holder_path(self.git_dir), (json.dumps(record) + "\n").encode(),
                         what=f"the lock holder record of lineage {self.name}", mode=0o644)
        except PathRefused:
            self.release()
            raise
        except OSError as error:
            self.release()
            fault = host_fault(error, f"writing the lock holder record of lineage {self.name}")
            if fault is not None:
                raise fault from error
            raise LockError(
                f"ouro: lineage {self.name}: cannot write {holder_path(self.git_dir)} "
                f"({error.strerror}): check the storage path and its permissions"
            ) from error

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            holder_path(self.git_dir).unlink(missing_ok=True)
            nothing_there = not any(os.path.lexists(place) for place in self.places)
            if nothing_there or (self.untouched and self._made_file):
                # Created nothing: leave nothing (safe only now, while we hold it).
                self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)  # drops the flock

    def __enter__(self) -> LineageLock:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
