"""Read-only work over many items, split across two processes: the second half mapped in
a forked child, the first here, at once.

Rule: only for reads whose results pickle (observing a fleet's lineages), only when there
are enough items to pay for a fork (``MIN_ITEMS``: a fork and the results' pickling cost
about as much as observing forty in-sync lineages), this process may run on two cores or
more, and no other thread runs here (a fork copies only the calling thread: a lock
another thread held would stay held in the child). The child never returns into the
caller's code: it maps its half, writes the pickled results to a pipe and leaves with
``os._exit`` (nothing of the parent's is flushed or run at exit twice). Whatever becomes
of the child (it raises, dies, is killed, or its results do not unpickle; or there is no
process or descriptor to spare for it), this process maps that half itself: the answer is
always the serial one, and an error is raised here, by the item that raises it. The child
is always reaped, and killed first when the caller's half raised or was interrupted.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["MIN_ITEMS", "map_halves"]

MIN_ITEMS = 64

T = TypeVar("T")
R = TypeVar("R")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # (a job's allotment, not the machine's)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _alone() -> bool:
    """No other thread runs in this process (a fork copies only the calling thread)."""
    return threading.active_count() == 1


def map_halves(function: Callable[[T], R], items: Sequence[T], *,
               min_items: int = MIN_ITEMS) -> list[R]:
    """``[function(item) for item in items]``, the second half in a forked child when that
    pays (see the module rule)."""
    if len(items) < max(min_items, 2) or _cores() < 2 or not _alone() or not hasattr(
            os, "fork"):
        return [function(item) for item in items]
    half = len(items) // 2
    first, second = items[:half], items[half:]
    forked = _fork()
    if forked is None:  # no process or descriptor to spare (a fleet at its limits): serial
        return [function(item) for item in items]
    pid, read_end, write_end = forked
    if pid == 0:  # the child: its half, pickled into the pipe, and gone
        _child(function, second, read_end, write_end)
    os.close(write_end)
    data = b""
    finished = False
    try:
        mine = [function(item) for item in first]
        with os.fdopen(read_end, "rb") as results:
            read_end = -1
            data = results.read()
        finished = True
    finally:
        if read_end != -1:
            os.close(read_end)
        exited = _reap(pid, kill=not finished)
    return mine + _theirs(data if exited else b"", function, second)


def _fork() -> tuple[int, int, int] | None:
    """A pipe and a fork: (pid, read end, write end); None, nothing left open, when the
    host has no descriptor or process to spare (EMFILE, EAGAIN)."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        return os.fork(), read_end, write_end
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None


def _child(function: Callable[[T], R], items: Sequence[T], read_end: int,
           write_end: int) -> None:
    code = 1
    try:
        os.close(read_end)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # (Ctrl-C: the parent decides)
        data = pickle.dumps([function(item) for item in items],
                            protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view):]
        code = 0
    finally:
        os._exit(code)


def _reap(pid: int, *, kill: bool) -> bool:
    """Wait for the child (killed first when ``kill``); did it exit 0?"""
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:  # (a signal's EINTR is retried by Python itself: PEP 475)
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return False
    return os.waitstatus_to_exitcode(status) == 0


def _theirs(data: bytes, function: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """The child's results, or ``items`` mapped here when they cannot be had."""
    try:
        found = pickle.loads(data) if data else None
    except Exception:  # (whatever a broken pickle raises: that half is mapped here)
        found = None
    if isinstance(found, list) and len(found) == len(items):
        return found
    return [function(item) for item in items]
