"""The broker fork server's own process: one per apply, forks one broker per generation.
Trusted harness.

Started by ``forker.ForkServer`` as ``python -I -m reconciler.kernel.broker.forkserver``
(physics release 5), with the broker's environment and no key: it imports what a
broker imports (``process``, ``providers``, ``ledger``, httpx) once, then waits on its
stdin, a Unix socket to the kernel. Each request carries three descriptors (the new
broker's stdin and stdout pipes and its log file) and the broker's private folder;
the server forks, and the child becomes that generation's broker: its own session,
those descriptors as 0, 1 and 2 (every other closed), the private folder as its working
directory and HOME/TMPDIR there, then ``process.main`` -- which reads the configuration
and the key from its stdin, written by the kernel only after this server has replied,
so the server never holds the key nor a descriptor it could read it from.

The reply is the child's pidfd and the read end of a status pipe: when the server
reaps the child (it is its parent), it writes the exit status there (4 bytes, a
``waitpid`` status). The server exits when its stdin reaches end of file (the kernel is
gone); each broker exits when its own stdin does, as a broker started alone does.
Single-threaded, so a fork copies no other thread's half-held lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
from typing import Any

from . import process

_MAX_REQUEST = 1 << 16


def _preload() -> None:
    """What every broker imports, imported once here (the reason this server exists)."""
    for name in process.UNUSED_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    import encodings.idna  # noqa: F401  (a URL's host is encoded with it)

    import httpx

    from . import ledger, providers  # noqa: F401

    context = providers.tls_context()  # the CA bundle loaded once, not by every broker
    httpx.HTTPTransport(verify=context).close()  # (httpx imports httpcore and h11 here)


def _child(request: dict[str, Any], fds: list[int]) -> int:
    """In the forked child: become the generation's broker."""
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target, inheritable=True)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.closerange(3, soft if soft != resource.RLIM_INFINITY else 1 << 20)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(request["private_dir"])
    os.environ["HOME"] = request["home"]
    os.environ["TMPDIR"] = request["tmp"]
    return process.main()


def _serve(control: socket.socket) -> None:
    statuses: dict[int, int] = {}  # child pid -> write end of its status pipe
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ, "control")
        selector.register(wake_r, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in selector.select():
                if key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 512)
                    _reap(statuses)
                    continue
                message, fds, _, _ = socket.recv_fds(control, _MAX_REQUEST, 3)
                if not message:
                    return  # the kernel is gone; each broker goes when its stdin ends
                _fork(control, json.loads(message), fds, statuses)
            _reap(statuses)


def _fork(control: socket.socket, request: dict[str, Any], fds: list[int],
          statuses: dict[int, int]) -> None:
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        control.sendall(b"error: three descriptors expected\n")
        return
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: never returns into the server's loop
        code = 1
        try:
            code = _child(request, fds)
        except SystemExit as exc:  # the broker's own way out (SIGTERM: exit 0)
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                os.write(2, f"broker: cannot start: {type(exc).__name__}: {exc}\n".encode())
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    statuses[pid] = status_w
    try:
        socket.send_fds(control, [b"ok"], [pidfd, status_r])
    finally:
        os.close(pidfd)
        os.close(status_r)


def _reap(statuses: dict[int, int]) -> None:
    while statuses:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        write = statuses.pop(pid, None)
        if write is not None:
            with contextlib.suppress(OSError):
                os.write(write, struct.pack("<i", status))
            os.close(write)


def main() -> int:
    _preload()
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    control = socket.socket(fileno=os.dup(0))
    os.close(0)
    try:
        _serve(control)
    finally:
        control.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
