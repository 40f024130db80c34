"""Who holds a lineage: the apply lock's files, read (never taken) by plan and status.

An apply holds ``<git dir>.ouro-lock`` with an exclusive ``flock`` and writes who
it is into ``<git dir>.ouro-lock.json`` (``reconciler.engine.locks`` takes and
releases it). Here the lock is only probed: a shared, non-blocking ``flock`` that
fails means another process holds it, and its record names it. Nothing is created,
and no link is followed: a lock or record that is a link reads as no holder (apply,
which opens them, refuses it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from reconciler.ownfiles import read_regular

__all__ = ["Holder", "held_by", "holder_path", "lock_path", "read_holder"]

LOCK_SUFFIX = ".ouro-lock"
HOLDER_SUFFIX = ".ouro-lock.json"
_MAX_HOLDER_BYTES = 64 << 10


@dataclass(frozen=True)
class Holder:
    pid: int | None
    host: str | None
    started_at: str | None
    command: str | None

    def describe(self) -> str:
        if self.pid is None:
            return "an unknown process (no holder record)"
        return f"pid {self.pid} on {self.host or '?'} since {self.started_at or '?'}"

    def running(self, generation: int | None) -> str:
        """What plan and status say of a lineage this holder is working on."""
        who = (f"apply pid {self.pid} on {self.host or '?'}" if self.pid is not None
               else "another apply (no holder record)")
        return f"running in {who}" + (f", generation {generation}" if generation else "")


def lock_path(git_dir: Path) -> Path:
    return git_dir.with_name(git_dir.name + LOCK_SUFFIX)


def holder_path(git_dir: Path) -> Path:
    return git_dir.with_name(git_dir.name + HOLDER_SUFFIX)


def read_holder(git_dir: Path) -> Holder:
    try:
        data = json.loads(read_regular(holder_path(git_dir), _MAX_HOLDER_BYTES) or b"null")
    except (OSError, ValueError):
        return Holder(None, None, None, None)
    if not isinstance(data, dict):
        return Holder(None, None, None, None)

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) else None

    pid = data.get("pid")
    return Holder(
        pid if isinstance(pid, int) else None, text("host"), text("started_at"), text("command")
    )


def held_by(git_dir: Path) -> Holder | None:
    """The other process holding this lineage's apply lock, or None (free, or this one's)."""
    try:
        fd = os.open(lock_path(git_dir),
                     os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file (no apply ever held it), or a link (apply refuses it)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(git_dir)
            mine = holder.pid == os.getpid() and holder.host == socket.gethostname()
            return None if mine else holder
        except OSError:
            return None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
