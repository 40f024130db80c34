"""`ouro status` while apply runs a generation: the generation is shown running, not as a
problem (a real apply in another process, a real sandbox, an organism that takes its time)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.apply.helpers import (
    REPO_ROOT,
    UNASKED,
    ouro_argv,
    run_ouro,
    write_replies,
    write_spec,
)

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

# The seed asks for this body; this body lives a while (so status sees it running), then
# exits 0 having changed nothing.
SLOW_BODY = '(sleep-for 10)\n(message "slow life")\n'


def test_status_shows_a_running_generation_as_running_not_as_a_problem(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    replies = write_replies(specs / "replies", [SLOW_BODY, UNASKED])
    write_spec(specs, "slow", 2, provider="replay", replay=str(replies))
    applying = subprocess.Popen(ouro_argv("apply", "--yes", str(specs)), cwd=REPO_ROOT,
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        seen = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and applying.poll() is None:
            status = run_ouro("status", str(specs), env=env)
            if "generation 2" in status.stdout and "running" in status.stdout:
                seen = status
                break
            time.sleep(0.5)
        assert seen is not None, "status never saw generation 2 running"
        assert seen.returncode == 0, seen.stderr
        assert "problem" not in seen.stdout, seen.stdout
        assert "running in apply pid" in seen.stdout, seen.stdout
    finally:
        out, err = applying.communicate(timeout=180)
    assert applying.returncode == 0, out + err
