"""The organism's model socket, held by the kernel: connections wait until the broker
answers, then are relayed byte for byte; hostile clients cannot make the kernel spin
or grow."""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.kernel.broker.relay import Door


class Upstream:
    """A stand-in broker: reads a request until EOF or 5 bytes, answers, closes."""

    def __init__(self, path: Path, delay: float = 0.0) -> None:
        self.path = path
        self.delay = delay
        self.requests: list[bytes] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(4)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while len(data) < 5:
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data)
                time.sleep(self.delay)
                conn.sendall(b"reply:" + data)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def door(tmp_path: Path) -> Iterator[Door]:
    (tmp_path / "kernel").mkdir()
    opened = Door(tmp_path / "kernel")
    yield opened
    opened.close()


def connect(door: Door) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(10)
    client.connect(str(door.path))
    return client


def read_all(client: socket.socket) -> bytes:
    data = b""
    while chunk := client.recv(1024):
        data += chunk
    return data


def test_connections_wait_until_the_broker_answers(door: Door, tmp_path: Path) -> None:
    client = connect(door)
    client.sendall(b"hello")
    time.sleep(0.3)  # no broker yet: the connection waits, it is not refused
    upstream = Upstream(tmp_path / "broker.sock")
    door.open(upstream.path)
    assert read_all(client) == b"reply:hello"
    second = connect(door)
    second.sendall(b"again")
    assert read_all(second) == b"reply:again"
    upstream.close()


def test_half_closed_request_does_not_make_the_kernel_spin(door: Door, tmp_path: Path) -> None:
    upstream = Upstream(tmp_path / "broker.sock", delay=1.5)
    door.open(upstream.path)
    client = connect(door)
    client.sendall(b"hi")
    client.shutdown(socket.SHUT_WR)
    before = resource.getrusage(resource.RUSAGE_SELF)
    assert read_all(client) == b"reply:hi"
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu < 0.5  # waited 1.5 s for the reply without busy-looping
    upstream.close()


def test_refused_broker_closes_waiting_connections(door: Door) -> None:
    client = connect(door)
    client.sendall(b"hello")
    door.refuse()
    with contextlib.suppress(ConnectionResetError):  # closed with the request unread
        assert read_all(client) == b""


def test_a_flood_of_connections_is_bounded(door: Door, tmp_path: Path) -> None:
    flood = []
    for _ in range(64):
        try:
            flood.append(connect(door))
        except OSError:
            break
    time.sleep(0.3)
    upstream = Upstream(tmp_path / "broker.sock")
    door.open(upstream.path)
    closed = 0
    for client in flood:
        client.settimeout(0.5)
        try:
            if client.recv(1) == b"":
                closed += 1
        except ConnectionResetError:
            closed += 1
        except TimeoutError:
            pass  # one of the waiting few, linked to the broker in turn
    assert closed >= len(flood) - 16
    for client in flood:
        client.close()
    late = connect(door)
    late.sendall(b"later")
    assert read_all(late) == b"reply:later"
    upstream.close()


def test_close_removes_the_socket(tmp_path: Path) -> None:
    (tmp_path / "kernel").mkdir()
    opened = Door(tmp_path / "kernel")
    assert opened.path.exists()
    opened.close()
    assert not opened.path.exists()
