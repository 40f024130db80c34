"""Ctrl-C on a real terminal: the keystroke reaches ouro only, never a generation.

``ouro apply`` runs in a new pseudo-terminal (``pty.fork``: its own session, the pty
its controlling terminal, ouro the foreground process group), and the test types
^C by writing the byte 0x03 to the pty master, so the kernel's line discipline
sends SIGINT to the whole foreground process group, exactly as a keystroke does.
A sandbox, a broker or any child left in that group would die of the keystroke
and be recorded as a death (outcome ``signal``, ``died (exit 130)``): a false
record. The first ^C lets the running generations finish (and starts no new
one); a second ends them, publishing nothing, their spend recorded under
``interrupted/``. Exit 130 either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pygit2
import pytest

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import LineagePaths
from tests.apply.helpers import QUIET_BODY, assert_invariant, ouro_argv, write_spec
from tests.fakes.provider_server import FakeProvider, chat_ok, script
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

CTRL_C = b"\x03"
MODEL_DELAY_S = 5.0  # each model request stalls this long: a generation is running meanwhile


class Terminal:
    """``ouro`` on a fresh pty; everything it prints is drained into ``output``."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: a session leader whose controlling terminal is the pty
            try:
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.output = bytearray()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # EIO: the child side is closed
                return
            if not chunk:
                return
            self.output += chunk

    def type(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self._reader.join(5)
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        raise AssertionError(f"ouro did not exit in {timeout} s:\n{self.text}")

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", "replace")


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def _slow_model() -> Iterator[FakeProvider]:
    with FakeProvider(script(_delayed(chat_ok(QUIET_BODY, 100, 50)))) as fake:
        yield fake


def _posts(fake: FakeProvider) -> list[object]:
    """The model requests (apply's probe, a GET of the model list, comes first)."""
    return [seen for seen in fake.requests if seen.method == "POST"]


def _delayed(reply: object) -> object:
    from dataclasses import replace

    return replace(reply, delay=MODEL_DELAY_S)  # type: ignore[type-var]


def _fleet(folder: Path, names: list[str], url: str) -> None:
    folder.mkdir()
    for name in names:
        write_spec(folder, name, 5, provider="openai-compatible", extra_model=f"""
            name: local-test
            base_url: {url}/v1
            price: {{input_usd_per_mtok: "1.00", output_usd_per_mtok: "2.00"}}
        """)


def _observations(paths: LineagePaths) -> list[dict[str, object]]:
    folder = paths.observations / formats.GENERATIONS_DIR
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if (
        folder.is_dir()) else []


def _interrupted_records(paths: LineagePaths) -> list[dict[str, object]]:
    repo = pygit2.Repository(str(paths.observations))
    tree = repo.head.peel(pygit2.Commit).tree
    if formats.INTERRUPTED_DIR not in tree:
        return []
    folder = repo[tree[formats.INTERRUPTED_DIR].id]
    return [json.loads(repo[entry.id].data) for entry in folder]


def _no_death_anywhere(paths: LineagePaths) -> None:
    for record in _observations(paths):
        assert record["outcome"] not in ("signal", "process_exit"), record["outcome"]
        assert record["exit_status"] == 0, record
    repo = pygit2.Repository(str(paths.git_dir))
    head = repo.references[f"refs/heads/{paths.branch}"].peel(pygit2.Commit)
    for commit in repo.walk(head.id):
        assert "died" not in commit.message, commit.message


def _start(tmp_path: Path, names: list[str], parallel: int, url: str) -> Terminal:
    specs = tmp_path / "specs"
    _fleet(specs, names, url)
    env = {**os.environ, "OURO_STATE_DIR": str(tmp_path / "state"), "TERM": "xterm"}
    argv = ouro_argv("apply", "--yes", "--parallel", str(parallel), str(specs))
    assert argv[0] == sys.executable
    return Terminal(argv, env)


@pytest.mark.parametrize("parallel", [1, 2], ids=["parallel-1", "parallel-2"])
def test_one_ctrl_c_lets_running_generations_finish(tmp_path: Path, parallel: int) -> None:
    names = ["ant", "bee"][:parallel]
    with _slow_model() as fake:
        terminal = _start(tmp_path, names, parallel, fake.url)
        _wait_for(lambda: len(_posts(fake)) >= parallel, "every generation's model request")
        time.sleep(0.5)
        terminal.type(CTRL_C)
        code = terminal.wait(timeout=120)
    assert code == 130, terminal.text
    assert "finishing running generations" in terminal.text
    for name in names:
        paths = lineage_paths(tmp_path / "state", name)
        records = _observations(paths)
        assert len(records) == 1, (name, terminal.text)  # it finished; none started after
        assert str(records[0]["outcome"]).startswith("changed"), records[0]["outcome"]
        _no_death_anywhere(paths)
        assert_invariant(paths, 1)
    assert len(_posts(fake)) == parallel  # no new generation asked the model


@pytest.mark.parametrize("parallel", [1, 2], ids=["parallel-1", "parallel-2"])
def test_two_ctrl_c_end_running_generations_publishing_nothing(tmp_path: Path,
                                                               parallel: int) -> None:
    names = ["cow", "doe"][:parallel]
    with _slow_model() as fake:
        terminal = _start(tmp_path, names, parallel, fake.url)
        _wait_for(lambda: len(_posts(fake)) >= parallel, "every generation's model request")
        time.sleep(0.5)
        terminal.type(CTRL_C)
        _wait_for(lambda: "finishing running generations" in terminal.text, "the first ^C")
        terminal.type(CTRL_C)
        code = terminal.wait(timeout=120)
    assert code == 130, terminal.text
    assert "stopping running generations now" in terminal.text
    for name in names:
        paths = lineage_paths(tmp_path / "state", name)
        assert _observations(paths) == [], terminal.text  # nothing published
        _no_death_anywhere(paths)
        assert_invariant(paths, 0)
        (record,) = _interrupted_records(paths)  # the discarded attempt, with its spend
        assert record["generation"] == 1, record
        assert record["model_calls"], record
