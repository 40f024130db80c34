"""Ctrl-C twice during a real apply: the running generation is stopped (publishing
nothing), the exit is 130, and the summary still says why it stopped early (issue 41,
10: it said nothing once the second interrupt ended the run before any other check)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.apply.helpers import (
    UNASKED,
    assert_invariant,
    observation_numbers,
    ouro_argv,
    write_replies,
    write_spec,
)
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

SLOW = ";; a life that takes its time and changes nothing\n(sleep-for 20)\n"


def _wait_for(predicate: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_a_second_interrupt_still_says_stopped_early(specs: Path, env: dict[str, str],
                                                     tmp_path: Path) -> None:
    replies = write_replies(specs / "replies", [SLOW, *[UNASKED] * 5])
    write_spec(specs, "xi", 5, provider="replay", replay=str(replies))
    paths = lineage_paths(tmp_path / "state", "xi")
    process = subprocess.Popen(ouro_argv("apply", "--yes", str(specs)), env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: len(observation_numbers(paths)) >= 1)  # gen 2 (20 s) is running
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, out + err
    assert "stopping running generations now" in err, err
    assert "Stopped early (interrupt); the next apply continues." in out, out
    assert len(observation_numbers(paths)) == 1  # gen 2 published nothing
    assert_invariant(paths, 1)
