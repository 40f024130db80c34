"""The organism's model socket, held by the kernel; its requests relayed to the broker.

Trusted harness. ``Door`` binds ``<kernel_dir>/model.sock`` (the organism's
``/kernel/model.sock``) before the sandbox starts, queues connections until the
broker is up, then relays each byte for byte to the broker's own socket, one
exchange at a time. Nothing is parsed here; everything is bounded.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .door import SOCKET_FILE

__all__ = ["DOOR_BACKLOG", "DOOR_STALL_S", "Door"]

DOOR_BACKLOG = 16
DOOR_BUFFER = 1 << 16
DOOR_STALL_S = 30.0


class Door:
    """The organism's ``/kernel/model.sock``, held by the kernel from before the sandbox starts.

    The broker takes a while to come up (a fresh Python process); the organism should
    not wait for it to *start*, only to *answer*. So the kernel binds the socket the
    organism sees, and the broker its own, elsewhere. Connections wait in the door's
    backlog until the broker is ready, then are relayed byte for byte, one at a time
    (the broker serves one request at a time; every reply closes its connection).
    Nothing is parsed here. Bounded: ``DOOR_BACKLOG`` waiting connections (more are
    closed at once), one chunk in flight, and an organism that stops reading its reply
    is dropped after ``DOOR_STALL_S``.
    """

    def __init__(self, kernel_dir: Path) -> None:
        self.path = kernel_dir / SOCKET_FILE
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.listener.bind(str(self.path))
            self.listener.listen(DOOR_BACKLOG)
            self.listener.setblocking(False)
        except OSError:
            self.listener.close()
            raise
        self.upstream: str | None = None
        self.refused = False
        self.stopped = False
        self.wake_r, self.wake_w = os.pipe()
        self.thread = threading.Thread(target=self._serve, name="ouro-model-door", daemon=True)
        self.thread.start()

    def _poke(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"x")

    def open(self, upstream: Path) -> None:
        self.upstream = str(upstream)
        self._poke()

    def refuse(self) -> None:
        self.refused = True
        self._poke()

    def close(self) -> None:
        self.stopped = True
        self._poke()
        self.thread.join(DOOR_STALL_S + 5)
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _serve(self) -> None:
        waiting: collections.deque[socket.socket] = collections.deque()
        pair: Pair | None = None
        try:
            while not self.stopped:
                if pair is None and waiting and (self.upstream or self.refused):
                    pair = self._link(waiting.popleft())
                    continue
                watched: list[Any] = [self.listener, self.wake_r]
                if pair is not None:
                    watched += pair.watched()
                ready = readable(watched, 1.0)
                if self.wake_r in ready:
                    os.read(self.wake_r, 64)
                if self.listener in ready:
                    with contextlib.suppress(BlockingIOError, InterruptedError):
                        client, _ = self.listener.accept()
                        if len(waiting) >= DOOR_BACKLOG:
                            client.close()
                        else:
                            client.settimeout(DOOR_STALL_S)
                            waiting.append(client)
                if pair is not None and not pair.move(ready):
                    pair.close()
                    pair = None
        finally:
            for client in waiting:
                client.close()
            if pair is not None:
                pair.close()
            self.listener.close()
            with contextlib.suppress(OSError):
                self.path.unlink()

    def _link(self, client: socket.socket) -> Pair | None:
        if self.refused or self.upstream is None:
            client.close()
            return None
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.settimeout(DOOR_STALL_S)
            upstream.connect(self.upstream)
        except OSError:
            upstream.close()
            client.close()
            return None
        return Pair(client, upstream)


def readable(watched: list[Any], timeout: float) -> list[Any]:
    """poll(2), not select(2): a busy kernel process may hold descriptors above 1024."""
    poller = select.poll()
    by_fd = {}
    for item in watched:
        fd = item if isinstance(item, int) else item.fileno()
        poller.register(fd, select.POLLIN)
        by_fd[fd] = item
    return [by_fd[fd] for fd, _ in poller.poll(int(timeout * 1000))]


@dataclass
class Pair:
    """One organism connection and its broker connection."""

    client: socket.socket
    upstream: socket.socket
    request_done: bool = False  # the organism closed its sending side

    def watched(self) -> list[socket.socket]:
        return [self.upstream] if self.request_done else [self.client, self.upstream]

    def move(self, ready: list[Any]) -> bool:
        """Move what is ready, a chunk each way; False when the exchange is over or broken."""
        try:
            if not self.request_done and self.client in ready:
                data = self.client.recv(DOOR_BUFFER)
                if data:
                    self.upstream.sendall(data)
                else:
                    self.request_done = True
                    self.upstream.shutdown(socket.SHUT_WR)
            if self.upstream in ready:
                data = self.upstream.recv(DOOR_BUFFER)
                if not data:
                    return False  # the broker closes after every reply
                self.client.sendall(data)
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.client.close()
        self.upstream.close()
