"""Slurm job folders on the real single-node cluster (issue 23): under umask 002 the job
folder is 0700 all the same, and a result pickle another user dropped into it is refused,
never unpickled (it ran in the submitting apply, as root, with the API key about)."""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.apply.helpers import UNASKED, ouro_argv, write_replies, write_spec
from tests.slurm.test_slurm_cluster import (
    SLOW_BODY,
    _events,
    _started,
    _wait_for,
    _with_executor,
)

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slurm, pytest.mark.slow]
NOBODY = 65534


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def test_a_job_folder_is_private_and_a_planted_result_is_refused(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    # Two generations, the second 8 s long: the job is still running when the result is
    # planted, whatever the host's load (with one, a quick job could finish first and
    # replace the planted file with its own result before apply looks).
    replies = write_replies(specs / "replies", [SLOW_BODY.format(seconds=8), UNASKED])
    _with_executor(write_spec(specs, "sl-priv", 2, provider="replay", replay=str(replies)))
    old = os.umask(0o002)
    try:
        process = subprocess.Popen(ouro_argv("apply", "--yes", "--executor", "slurm",
                                             str(specs)), env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finally:
        os.umask(old)
    try:
        _wait_for(lambda: process.poll() is not None or (
            (tmp_path / "state" / "events.jsonl").exists() and any(
                e["event"] == "job-submitted" for e in _events(tmp_path))))
    finally:
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"apply ended before its job ran: {out}{err}")
    job = next(e["executor_job"] for e in _events(tmp_path) if e["event"] == "job-submitted")
    jobs = tmp_path / "state" / "slurm-jobs"
    folder = jobs / job
    for place in (jobs, folder):
        assert stat.S_IMODE(place.stat().st_mode) == 0o700, place
    marker = tmp_path / "the-payload-ran"
    planted = folder / f"{job}_0_result.pkl"
    planted.write_bytes(pickle.dumps(("success", _Payload(marker))))
    os.chown(planted, NOBODY, NOBODY)  # as another user would have left it
    out, err = process.communicate(timeout=300)
    assert process.returncode == 1, out + err
    assert "result file" in out + err and "of another user" in out + err, out + err
    assert not marker.exists()
    _wait_for(lambda: _started(tmp_path, "sl-priv", 1), timeout=120)
    _wait_for(lambda: not (tmp_path / "state" / "sl-priv.git.ouro-lock.json").exists(),
              timeout=180)  # the job itself ends (its lineage is the next apply's)
