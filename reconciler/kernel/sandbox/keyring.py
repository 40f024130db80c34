"""A fresh, empty session keyring for every life (physics release 2). Trusted harness.

Rule: a life never runs in the keyring of whoever ran ouro. The sandbox is started
from a short-lived thread that first joins a new anonymous session keyring
(``keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)``): credentials are per thread in
Linux, so only the processes that thread starts get the new keyring, and the
kernel's other threads keep theirs. No ``preexec_fn`` (unsafe with threads) and no
extra program on the way to bwrap.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..base.errors import PreflightError

__all__ = ["in_fresh_session_keyring"]

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


def in_fresh_session_keyring(spawn: Callable[[], T]) -> T:
    """``spawn()`` on a new thread that first joined a new anonymous session keyring, so
    the processes it starts get that keyring and this process keeps its own."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            _join_fresh_session_keyring()
            box["value"] = spawn()
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="ouro-life-keyring")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value
