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


# ---------------------------------------------------------------- nothing left behind


def test_a_lock_whose_holder_created_nothing_is_removed(tmp_path: Path) -> None:
    git_dir = tmp_path / "delta.git"
    places = (tmp_path / "delta", git_dir, tmp_path / "delta.observations")
    with LineageLock("delta", git_dir, timeout=1, places=places):
        assert lock_path(git_dir).exists() and holder_path(git_dir).exists()
    assert not lock_path(git_dir).exists() and not holder_path(git_dir).exists()


@pytest.mark.parametrize("made", [0, 1, 2], ids=["worktree", "git-dir", "observations"])
def test_a_lock_beside_any_place_of_the_lineage_stays(tmp_path: Path, made: int) -> None:
    git_dir = tmp_path / "eps.git"
    places = (tmp_path / "eps", git_dir, tmp_path / "eps.observations")
    with LineageLock("eps", git_dir, timeout=1, places=places):
        places[made].mkdir()
    assert lock_path(git_dir).exists() and not holder_path(git_dir).exists()


def test_an_acquirer_that_locked_a_removed_file_locks_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: between our open and our flock, the holder released and removed the file."""
    import fcntl

    from reconciler.engine import locks

    git_dir = tmp_path / "zeta.git"
    real_flock = fcntl.flock
    calls: list[int] = []

    def flock_after_the_holder_left(fd: int, operation: int) -> None:
        calls.append(operation)
        if len(calls) == 1:
            lock_path(git_dir).unlink()  # what a holder that created nothing does on release
        real_flock(fd, operation)

    monkeypatch.setattr(locks.fcntl, "flock", flock_after_the_holder_left)
    lock = LineageLock("zeta", git_dir, timeout=1)
    lock.acquire()
    try:
        assert len(calls) == 2  # it went round once, on the new file
        monkeypatch.setattr(locks.fcntl, "flock", real_flock)
        with pytest.raises(LockError):  # and that new file is really the one held
            LineageLock("zeta", git_dir, timeout=0).acquire()
    finally:
        lock.release()


COUNT = """
import sys, time
from pathlib import Path
from reconciler.engine.locks import LineageLock
git_dir, counter, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
for _ in range(rounds):
    with LineageLock("eta", git_dir, timeout=60, places=(git_dir,)):
        value = int(counter.read_text())
        time.sleep(0.002)
        counter.write_text(str(value + 1))
"""


def test_holders_that_remove_the_lock_file_still_exclude_each_other(tmp_path: Path) -> None:
    git_dir, counter = tmp_path / "eta.git", tmp_path / "counter"
    counter.write_text("0")
    children = [subprocess.Popen([sys.executable, "-c", COUNT, str(git_dir), str(counter), "40"],
                                 cwd=Path(__file__).resolve().parents[2]) for _ in range(3)]
    for child in children:
        assert child.wait(timeout=120) == 0
    assert counter.read_text() == "120"  # no increment lost: never two holders at once
    assert not lock_path(git_dir).exists()


def test_an_untouched_lineage_loses_the_lock_file_its_holder_made(tmp_path: Path) -> None:
    git_dir = tmp_path / "theta.git"
    git_dir.mkdir()  # the lineage exists (another instrument's, say)
    with LineageLock("theta", git_dir, timeout=1, places=(git_dir,)) as lock:
        lock.untouched = True
    assert not lock_path(git_dir).exists()


def test_a_lock_file_that_was_there_before_stays(tmp_path: Path) -> None:
    git_dir = tmp_path / "iota.git"
    git_dir.mkdir()
    lock_path(git_dir).write_text("")
    with LineageLock("iota", git_dir, timeout=1, places=(git_dir,)) as lock:
        lock.untouched = True
    assert lock_path(git_dir).exists()


def test_a_touched_lineage_keeps_its_lock_file(tmp_path: Path) -> None:
    git_dir = tmp_path / "kappa.git"
    git_dir.mkdir()
    with LineageLock("kappa", git_dir, timeout=1, places=(git_dir,)):
        pass
    assert lock_path(git_dir).exists()
