"""A fresh, empty session keyring for every life (physics release 2). Trusted harness.

Rule: a life never runs in the keyring of whoever ran ouro. The sandbox is started
from a thread of its own that first joins a new anonymous session keyring
(``keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)``): credentials are per thread in
Linux, so only the processes that thread starts get the new keyring, and the
kernel's other threads keep theirs. No ``preexec_fn`` (unsafe with threads) and no
extra program on the way to bwrap. That thread outlives the process it started:
bwrap's ``--die-with-parent`` is PR_SET_PDEATHSIG, which fires when the parent
*thread* ends, so a thread that ended once the process had started would kill the
life whenever bwrap armed the signal first (a loaded host: a false signal-9 death).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..base.errors import PreflightError

__all__ = ["in_fresh_session_keyring", "start_in_fresh_session_keyring"]

T = TypeVar("T")

# keyctl(2) on x86_64 (the filter is written for that ABI alone)
_SYS_KEYCTL = 250
_KEYCTL_JOIN_SESSION_KEYRING = 1


def _join_fresh_session_keyring() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(_SYS_KEYCTL), ctypes.c_long(_KEYCTL_JOIN_SESSION_KEYRING),
                    ctypes.c_void_p(None)) >= 0:
        return
    code = ctypes.get_errno()
    if code == errno.ENOSYS:  # a kernel without keyrings: there is nothing to share
        return
    raise PreflightError(
        f"kernel: cannot give the life a fresh session keyring: {os.strerror(code)}; "
        "a life never runs in the operator's keyring (check the kernel's key quotas)")


def _popen_pid(value: object) -> int | None:
    return value.pid if isinstance(value, subprocess.Popen) else None


def start_in_fresh_session_keyring(
        spawn: Callable[[], T], pid_of: Callable[[T], int | None] = _popen_pid,
) -> Callable[[], T]:
    """``spawn()`` on a new thread that first joined a new anonymous session keyring, so
    the processes it starts get that keyring and this process keeps its own; returned at
    once: a call of what is returned waits for ``spawn``'s value (or raises its error).
    When that value holds a process (``pid_of``: a ``Popen``'s pid by default), the
    thread lives on until that process has exited."""
    box: dict[str, Any] = {}
    spawned = threading.Event()

    def target() -> None:
        try:
            _join_fresh_session_keyring()
            box["value"] = spawn()
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc
        finally:
            spawned.set()
        pid = pid_of(box["value"]) if "value" in box else None
        if pid is not None:
            _outlive(pid)

    thread = threading.Thread(target=target, name="ouro-life-keyring", daemon=True)
    thread.start()

    def result() -> T:
        spawned.wait()
        if "error" in box:
            raise box["error"]
        value: T = box["value"]
        return value

    return result


def in_fresh_session_keyring(spawn: Callable[[], T]) -> T:
    """``spawn()`` as ``start_in_fresh_session_keyring`` runs it, waited for."""
    return start_in_fresh_session_keyring(spawn)()


def _outlive(pid: int) -> None:
    """Wait until process ``pid`` has exited, without reaping it (its Popen does)."""
    with contextlib.suppress(ChildProcessError):  # reaped already
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
