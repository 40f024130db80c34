"""The thread that starts a life in a fresh keyring outlives the life.

bwrap's ``--die-with-parent`` is PR_SET_PDEATHSIG, which fires when the parent *thread*
ends. The child here arms it at once, as bwrap does, and the spawning step returns
only after it has: a thread that ended with ``spawn()`` would kill the child then.
"""

from __future__ import annotations

import subprocess
import sys
import threading

from reconciler.kernel.sandbox import keyring

ARM_THEN_LIVE = (
    "import ctypes, signal, sys, time\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG, as bwrap does
    "print('armed', flush=True)\n"
    "time.sleep(1)\n"
    "print('alive', flush=True)\n")


def _spawn_and_see_it_armed() -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", ARM_THEN_LIVE], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "armed\n"
    return proc


def test_a_life_armed_before_its_spawning_step_returned_lives_on() -> None:
    proc = keyring.in_fresh_session_keyring(_spawn_and_see_it_armed)
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (0, "alive\n"), "killed when its spawning thread ended"


def test_the_spawning_thread_ends_once_the_process_has() -> None:
    spawners: list[threading.Thread] = []

    def spawn() -> subprocess.Popen[str]:
        spawners.append(threading.current_thread())  # the thread itself, whatever its name
        return _spawn_and_see_it_armed()

    proc = keyring.in_fresh_session_keyring(spawn)
    (spawner,) = spawners
    assert spawner is not threading.current_thread() and spawner.is_alive()
    proc.communicate(timeout=30)
    spawner.join(10)
    assert not spawner.is_alive(), "the keyring thread outlived its process"


def test_a_value_that_is_no_process_is_handed_back_and_errors_raise() -> None:
    assert keyring.in_fresh_session_keyring(lambda: 42) == 42

    def fail() -> int:
        raise ValueError("spawn failed")

    try:
        keyring.in_fresh_session_keyring(fail)
    except ValueError as exc:
        assert str(exc) == "spawn failed"
    else:
        raise AssertionError("the spawn's error was not raised in the caller's thread")
