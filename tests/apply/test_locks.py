"""The per-lineage lock: exclusive, names its holder, free again when the holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.engine.locks import LineageLock, holder_path, lock_path, read_holder
from reconciler.errors import LockError

HOLD = """
import sys, time
from pathlib import Path
from reconciler.engine.locks import LineageLock
lock = LineageLock("alpha", Path(sys.argv[1]), timeout=5)
lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def _hold_in_child(git_dir: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(git_dir)], stdout=subprocess.PIPE,
                             text=True, cwd=Path(__file__).resolve().parents[2])
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


def test_second_holder_times_out_naming_the_first(tmp_path: Path) -> None:
    git_dir = tmp_path / "alpha.git"
    child = _hold_in_child(git_dir)
    try:
        started = time.monotonic()
        with pytest.raises(LockError) as caught:
            LineageLock("alpha", git_dir, timeout=0.5).acquire()
        assert time.monotonic() - started >= 0.5
        message = str(caught.value)
        assert f"pid {child.pid}" in message
        assert "lineage alpha is held by another apply" in message
        assert "--lock-timeout" in message
    finally:
        child.kill()
        child.wait()


def test_lock_of_a_killed_holder_is_taken_over(tmp_path: Path) -> None:
    git_dir = tmp_path / "alpha.git"
    child = _hold_in_child(git_dir)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert read_holder(git_dir).pid == child.pid  # the stale record is still there
    with LineageLock("alpha", git_dir, timeout=2):
        assert read_holder(git_dir).pid == os.getpid()
    assert not holder_path(git_dir).exists()


def test_lock_lives_beside_the_git_dir_before_the_lineage_exists(tmp_path: Path) -> None:
    git_dir = tmp_path / "deep" / "beta.git"
    with LineageLock("beta", git_dir, timeout=1):
        assert lock_path(git_dir).exists()
        assert not git_dir.exists()


@pytest.mark.parametrize("content", ["", "not json", "[1, 2]", '{"pid": "x"}'],
                         ids=["empty", "garbage", "list", "wrong-type"])
def test_unreadable_holder_record_is_reported_as_unknown(tmp_path: Path, content: str) -> None:
    git_dir = tmp_path / "gamma.git"
    holder_path(git_dir).write_text(content)
    assert read_holder(git_dir).describe() == "an unknown process (no holder record)"
