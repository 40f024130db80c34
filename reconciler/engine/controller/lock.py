"""One controller per state dir: an ``flock`` on ``<state dir>/.controller/controller.ouro-lock``.

Rule: the lock is held for the controller's whole life; the kernel drops it when its
holder dies (a SIGKILLed controller leaves a free lock). The holder writes who it is (pid,
host, start time, command) beside it, as an apply's lineage lock does
(``reconciler.engine.locks``), so that a second controller refuses naming the first.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

from reconciler.errors import LockError
from reconciler.ownfiles import open_regular, private_folder, write_atomic
from reconciler.state.conditions import CONTROLLER_DIR
from reconciler.state.holders import holder_path, lock_path, read_holder

__all__ = ["ControllerLock"]


class ControllerLock:
    """Context manager: ``acquire`` or a ``LockError`` naming the controller holding it."""

    def __init__(self, state_dir: Path) -> None:
        self.anchor = state_dir / CONTROLLER_DIR / "controller"
        self._fd: int | None = None
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")

    def acquire(self) -> None:
        private_folder(self.anchor.parent, "the controller's cache", replace_link=True)
        fd = open_regular(lock_path(self.anchor), os.O_RDWR | os.O_CREAT, 0o600,
                          what="the controller's lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = read_holder(self.anchor)
            raise LockError(
                f"ouro controller: another controller runs on this state dir "
                f"({holder.describe()}{': ' + holder.command if holder.command else ''}): "
                "one controller per state dir; stop it first (SIGTERM lets its running "
                "generations finish), or use another --state-dir") from None
        self._fd = fd
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started_at": self.started_at,
                  "command": " ".join(os.path.basename(a) if i == 0 else a
                                      for i, a in enumerate(sys.argv))}
        write_atomic(holder_path(self.anchor), (json.dumps(record) + "\n").encode(),
                     what="the controller's lock record", mode=0o600)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            holder_path(self.anchor).unlink(missing_ok=True)
            os.close(fd)

    def __enter__(self) -> ControllerLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
