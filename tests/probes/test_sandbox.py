"""A probe's sandbox: as strict as a life's, hostile output is a recorded failure."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from reconciler.engine.probes import output
from reconciler.kernel.broker.door import SOCKET_FILE
from reconciler.spec.probes import ProbeFiles

from .conftest import make_repo, run_probe

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def test_a_probe_measures_the_committed_tree_with_its_files(tmp_path: Path) -> None:
    (commit,) = make_repo(tmp_path / "x.git")
    files = ProbeFiles((("count.sh", True,
                         b'#!/bin/sh\nn=$(grep -c "^(defun" organism.el)\n'
                         b'printf \'{"defuns": %d, "home": "%s", "path": "%s", "pwd": "%s"}\' '
                         b'"$n" "$HOME" "$PATH" "$(pwd)"\n'),))
    run = run_probe(tmp_path / "x.git", commit, ["/probe/count.sh"], files)
    assert run.failure is None, (run.failure, run.stderr_tail)
    assert run.metrics == {"defuns": 3, "home": "/work", "path": "/usr/bin:/bin", "pwd": "/work"}
    assert run.exit_status == 0 and run.wall_ms > 0
    assert run.cpu_ms is not None and run.peak_memory_bytes is not None


def test_work_is_writable_and_probe_is_read_only(tmp_path: Path) -> None:
    (commit,) = make_repo(tmp_path / "x.git")
    files = ProbeFiles((("data", False, b"x"),))
    run = run_probe(tmp_path / "x.git", commit, sh(
        'echo more >> organism.el && w=true || w=false; '
        '(echo y > /probe/data) 2>/dev/null && p=true || p=false; '
        'printf \'{"work": %s, "probe": %s, "data": "%s"}\' $w $p "$(cat /probe/data)"'), files)
    assert run.metrics == {"work": True, "probe": False, "data": "x"}, run


@pytest.mark.parametrize(("script", "reason"), [
    ("echo not json", "not one JSON object"),
    ("printf '{\"a\": NaN}'", "not a finite number"),
    ("printf '{\"a\": Infinity}'", "not a finite number"),
    ("printf '{\"a\": -Infinity}'", "not a finite number"),
    ("printf '{\"a\": 1e999}'", "not a finite number"),
    ("printf '[1, 2]'", "not an object of metrics"),
    ("printf '{\"a\": {\"b\": 1}}'", "is object"),
    ("printf '{\"a\": null}'", "is null"),
    ("", "stdout is empty"),
    ("printf '\\377\\376'", "not UTF-8"),
    ("printf '{\"a b\": 1}'", "not a metric name"),
    ("head -c 100000000 /dev/zero", "longer than"),
    ("yes", "longer than"),
    ("exit 3", "exit status 3"),
    ("kill -9 $$", "exit status 137 (signal 9)"),
])
def test_hostile_output_is_a_failure_with_its_reason(tmp_path: Path, script: str,
                                                     reason: str) -> None:
    (commit,) = make_repo(tmp_path / "x.git")
    started = time.monotonic()
    run = run_probe(tmp_path / "x.git", commit, sh(script))
    assert run.metrics is None and run.failure is not None and reason in run.failure, run
    assert time.monotonic() - started < 25  # 100 MB are never read: the probe is stopped


def test_deep_nesting_and_ten_thousand_keys(tmp_path: Path) -> None:
    (commit,) = make_repo(tmp_path / "x.git")
    files = ProbeFiles((("deep.json", False, b"[" * 30000 + b"]" * 30000),
                        ("keys.json", False,
                         json.dumps({f"k{i}": i for i in range(10000)}).encode())))
    deep = run_probe(tmp_path / "x.git", commit, ["cat", "/probe/deep.json"], files)
    assert deep.failure == "stdout is JSON nested too deeply", deep
    keys = run_probe(tmp_path / "x.git", commit, ["head", "-c", "65000", "/probe/keys.json"],
                     files)
    assert keys.failure is not None, keys
    many = ProbeFiles((("keys.json", False,
                        json.dumps({f"k{i}": i for i in range(300)}).encode()),))
    over = run_probe(tmp_path / "x.git", commit, ["cat", "/probe/keys.json"], many)
    assert over.failure == f"stdout has 300 metrics; at most {output.MAX_METRICS}", over


def test_a_probe_that_never_exits_is_stopped_at_its_wall(tmp_path: Path) -> None:
    (commit,) = make_repo(tmp_path / "x.git")
    started = time.monotonic()
    run = run_probe(tmp_path / "x.git", commit, sh("sleep 1000 & sleep 1000"), wall=2, cpu=2)
    assert run.failure is not None and run.failure.startswith("timeout"), run
    assert time.monotonic() - started < 15


def test_no_network_no_git_dir_no_host_paths(tmp_path: Path) -> None:
    git_dir = tmp_path / "x.git"
    (commit,) = make_repo(git_dir)
    (tmp_path / "x.observations").mkdir()
    heard: list[bytes] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            heard.append(conn.recv(100))
            conn.close()

    listener = threading.Thread(target=accept)
    listener.start()
    program = (
        "import json, os, socket\n"
        "def net():\n"
        "    try:\n"
        f"        s = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        "        s.sendall(b'escaped'); return True\n"
        "    except OSError:\n"
        "        return False\n"
        f"print(json.dumps({{'net': net(), 'git': os.path.exists({str(git_dir)!r}),\n"
        f"  'obs': os.path.exists({str(tmp_path / 'x.observations')!r}),\n"
        f"  'tmp': os.path.exists({str(tmp_path)!r}), 'sock': os.path.exists('/run/model.sock'),\n"
        "  'env': ','.join(sorted(e.split(b'=')[0].decode() for e in\n"
        "                  open('/proc/self/environ', 'rb').read().split(b'\\0') if e))}))\n")
    try:
        run = run_probe(git_dir, commit, ["python3", "-c", program])
    finally:
        done.set()
        listener.join()
        server.close()
    assert run.metrics == {"net": False, "git": False, "obs": False, "tmp": False,
                           "sock": False, "env": "HOME,PATH"}, run
    assert heard == []


def test_no_model_socket_reaches_a_probe(tmp_path: Path) -> None:
    """Neither the life's socket place (/kernel/model.sock), nor a broker's socket on the
    host by its path, nor an abstract socket of the host's network namespace."""
    git_dir = tmp_path / "x.git"
    (commit,) = make_repo(git_dir)
    on_disk = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    on_disk.bind(str(tmp_path / SOCKET_FILE))
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0ouro-test-model-{uuid.uuid4().hex}"
    abstract.bind(name)
    for server in (on_disk, abstract):
        server.listen()
        server.setblocking(False)
    program = (
        "import json, os, socket\n"
        "def reach(where):\n"
        "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "    try:\n"
        "        s.connect(where); s.sendall(b'POST /generate'); return True\n"
        "    except OSError:\n"
        "        return False\n"
        f"print(json.dumps({{'kernel': reach('/kernel/{SOCKET_FILE}'),\n"
        f"  'host': reach({str(tmp_path / SOCKET_FILE)!r}), 'abstract': reach({name!r}),\n"
        f"  'listed': '{SOCKET_FILE}' in os.listdir('/kernel')}}))\n")
    try:
        run = run_probe(git_dir, commit, ["python3", "-c", program])
        heard = []
        for server in (on_disk, abstract):
            with contextlib.suppress(BlockingIOError):
                heard.append(server.accept())
    finally:
        on_disk.close()
        abstract.close()
    assert run.metrics == {"kernel": False, "host": False, "abstract": False,
                           "listed": False}, run
    assert heard == []
