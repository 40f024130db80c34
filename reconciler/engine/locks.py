"""One apply per lineage at a time: an exclusive lock beside the lineage's git dir.

The lock is an ``flock`` (through ``filelock``) on ``<git dir>.ouro-lock``, a
sibling of the git dir so it exists before the lineage does (a ``create`` is
locked too). The kernel drops an ``flock`` when its holder dies, so a lock left
by a killed apply is simply free again: taking it over needs no guesswork. The
holder writes who it is (pid, host, start time, command) into
``<git dir>.ouro-lock.json`` so that a waiting apply can name it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

import filelock

from reconciler.errors import LockError


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


def lock_path(git_dir: Path) -> Path:
    return git_dir.with_name(git_dir.name + ".ouro-lock")


def holder_path(git_dir: Path) -> Path:
    return git_dir.with_name(git_dir.name + ".ouro-lock.json")


def read_holder(git_dir: Path) -> Holder:
    try:
        data = json.loads(holder_path(git_dir).read_text(encoding="utf-8"))
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


class LineageLock:
    """Context manager: hold a lineage for the whole of an apply."""

    def __init__(self, name: str, git_dir: Path, *, timeout: float) -> None:
        self.name = name
        self.git_dir = git_dir
        self.timeout = timeout
        self._lock = filelock.FileLock(str(lock_path(git_dir)), timeout=timeout)

    def acquire(self) -> None:
        try:
            self.git_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise LockError(
                f"ouro: lineage {self.name}: cannot create {self.git_dir.parent} for its lock "
                f"({error.strerror}): check the storage path and its permissions"
            ) from error
        started = time.monotonic()
        try:
            self._lock.acquire()
        except filelock.Timeout as error:
            holder = read_holder(self.git_dir)
            raise LockError(
                f"ouro: lineage {self.name} is held by another apply ({holder.describe()}); "
                f"waited {time.monotonic() - started:.0f}s (--lock-timeout {self.timeout:g}s): "
                "let it finish, or raise --lock-timeout"
            ) from error
        except OSError as error:
            raise LockError(
                f"ouro: lineage {self.name}: cannot lock {lock_path(self.git_dir)} "
                f"({error.strerror})"
            ) from error
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(
                os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv)
            ),
        }
        temporary = holder_path(self.git_dir).with_suffix(".tmp")
        temporary.write_text(json.dumps(record) + "\n", encoding="utf-8")
        os.replace(temporary, holder_path(self.git_dir))

    def release(self) -> None:
        try:
            holder_path(self.git_dir).unlink(missing_ok=True)
        finally:
            self._lock.release()

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
