"""The kernel's side of the broker fork server (physics release 5). Trusted harness.

Rule: a broker per generation, without a fresh Python per generation. The first broker
a process asks for starts the fork server (``forkserver``: holding no key, with the
broker's environment), and every broker after it is forked from there: its stdin and
stdout pipes and its log file are passed over a Unix socket, the server forks and
answers with the child's pidfd and a status pipe. Only then does the kernel write the
configuration with the key into the broker's stdin (``door.Broker.start``), so only
that generation's broker process ever holds the key. ``Forked`` is what the kernel holds
of it: the part of ``subprocess.Popen`` a ``Broker`` uses (poll, wait, terminate, kill,
the pipes, the pid, the return code), through the pidfd.

When the kernel's process dies, the server's socket and every broker's stdin reach end
of file, and all of them exit: a killed apply leaves no broker behind. A server that
cannot start or answer is replaced on the next request; ``spawn`` raising ``OSError``
tells the caller to start a broker process of its own instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import threading
from pathlib import Path
from typing import IO

from ..base.launch import module_command

__all__ = ["ENABLED", "Forked", "spawn", "start"]

# False in a pinned kernel's own process (``entry``): one process per generation, where a
# server would be one process more, not one fewer.
ENABLED = True
SERVER_MODULE = f"{__package__}.forkserver"
_REPLY_TIMEOUT_S = 30.0
_LOCK = threading.Lock()
_server: list[tuple[subprocess.Popen[bytes], socket.socket]] = []


class Forked:
    """A broker forked by the server: ``subprocess.Popen``'s surface, through a pidfd."""

    def __init__(self, pid: int, pidfd: int, status_fd: int, stdin: IO[bytes],
                 stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._status_fd = status_fd

    def poll(self) -> int | None:
        return self._wait(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._wait(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"broker {self.pid}", timeout or 0.0)
        return code

    def _wait(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if not _readable(self._status_fd, timeout):
            return None
        data = os.read(self._status_fd, 4)
        if len(data) == 4:
            self.returncode = os.waitstatus_to_exitcode(struct.unpack("<i", data)[0])
        elif _readable(self._pidfd, timeout):  # the server died before it reaped the broker
            self.returncode = -signal.SIGKILL  # (its status is lost with the server)
        else:
            return None
        os.close(self._status_fd)
        os.close(self._pidfd)
        self._status_fd = self._pidfd = -1
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _readable(fd: int, timeout: float | None) -> bool:
    """poll(2), not select(2): the kernel may hold descriptors past 1,024 (release 3)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000))))


def spawn(package_root: Path, env: dict[str, str], private_dir: Path,
          log_fd: int, *, no_bytecode: bool) -> Forked:
    """A new broker process forked by this process's server (started if need be), its
    stdin and stdout piped to us, its stderr ``log_fd``, in ``private_dir``. Raises
    ``OSError`` when no server can fork it."""
    stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
    stdout_r, stdout_w = os.pipe2(os.O_CLOEXEC)
    request = json.dumps({"private_dir": str(private_dir), "home": str(private_dir / "home"),
                          "tmp": str(private_dir / "tmp")}).encode()
    try:
        with _LOCK:
            pidfd, status_fd = _ask(package_root, env, request, [stdin_r, stdout_w, log_fd],
                                    no_bytecode)
    except BaseException:
        for fd in (stdin_w, stdout_r):
            os.close(fd)
        raise
    finally:
        for fd in (stdin_r, stdout_w):
            os.close(fd)
    pid = _pid_of(pidfd)
    return Forked(pid, pidfd, status_fd, open(stdin_w, "wb"), open(stdout_r, "rb"))


def start(package_root: Path, env: dict[str, str], *, no_bytecode: bool) -> None:
    """Start this process's server now, if none runs: its start-up (a Python, its imports,
    the TLS context) then happens beside the caller's other work, not in the first
    generation's. Raises ``OSError`` when it cannot be started."""
    with _LOCK:
        _control(package_root, env, no_bytecode)


def _ask(package_root: Path, env: dict[str, str], request: bytes, fds: list[int],
         no_bytecode: bool) -> tuple[int, int]:
    for attempt in range(2):  # a server that died is replaced once
        control = _control(package_root, env, no_bytecode)
        try:
            socket.send_fds(control, [request], fds)
            control.settimeout(_REPLY_TIMEOUT_S)
            message, received, _, _ = socket.recv_fds(control, 256, 2)
        except OSError:
            _stop_server()
            if attempt:
                raise
            continue
        if message == b"ok" and len(received) == 2:
            return received[0], received[1]
        for fd in received:
            os.close(fd)
        _stop_server()
        raise OSError(f"the broker fork server refused: {message[:200]!r}")
    raise OSError("the broker fork server did not answer")


def _control(package_root: Path, env: dict[str, str], no_bytecode: bool) -> socket.socket:
    if _server and _server[0][0].poll() is None:
        return _server[0][1]
    _stop_server()
    env = dict(env, HOME="/", TMPDIR="/tmp")  # no generation's folder: each child sets its own
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server = subprocess.Popen(
            module_command(package_root, SERVER_MODULE, no_bytecode=no_bytecode),
            stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            cwd="/", close_fds=True, start_new_session=True)
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    _server[:] = [(server, ours)]
    return ours


def _stop_server() -> None:
    """Close the socket (the server exits at its end of file) and reap the server."""
    for server, control in _server:
        control.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(5)
        if server.poll() is None:
            server.kill()
            server.wait()
    _server.clear()


def _forget_in_child() -> None:
    """A process forked from ours (a fleet's second half is planned in one) shares
    nothing of the server: it would start its own, and its copy of the socket would keep
    ours from seeing our end."""
    for _, control in _server:
        with contextlib.suppress(OSError):
            control.close()
    _server.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _pid_of(pidfd: int) -> int:
    with open(f"/proc/self/fdinfo/{pidfd}", encoding="ascii") as info:
        for line in info:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    raise OSError(f"pidfd {pidfd} names no process")
