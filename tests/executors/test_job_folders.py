"""Slurm job folders (issue 23): 0700 whatever the umask, and a result is unpickled only
from the folder ouro made, owned by this user, writable by no one else; a pickle another
group member dropped in a group-writable job folder is never loaded."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reconciler.engine.executors.slurm import jobs_folder, made_folder, read_result
from reconciler.errors import PathRefused


class _Payload:
    """What the attacker pickled: loading it makes a folder (it could run anything)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def _job(folder: Path) -> Any:
    return SimpleNamespace(job_id="4242", paths=SimpleNamespace(
        folder=folder, result_pickle=folder / "4242_0_result.pkl"))


def _submitted(state: Path, umask: int) -> tuple[Any, tuple[int, int]]:
    """A job folder as submitit makes it under ``umask``, then as ouro keeps it."""
    old = os.umask(umask)
    try:
        folder = jobs_folder(state) / "4242"
        folder.mkdir()
    finally:
        os.umask(old)
    job = _job(folder)
    return job, made_folder(job)


def test_job_folders_are_private_whatever_the_umask(tmp_path: Path) -> None:
    job, _ = _submitted(tmp_path / "state", 0o002)
    for folder in (tmp_path / "state", tmp_path / "state" / "slurm-jobs", job.paths.folder):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_a_planted_result_is_never_unpickled(tmp_path: Path) -> None:
    """The attack: under umask 002 the job folder was group-writable and another member
    dropped a result pickle there. Every way of planting it is refused, unloaded."""
    marker = tmp_path / "the-payload-ran"
    job, made = _submitted(tmp_path / "state", 0o002)
    planted = pickle.dumps(("success", _Payload(marker)))
    job.paths.result_pickle.write_bytes(planted)
    os.chmod(job.paths.folder, 0o770)  # as submitit left it under umask 002
    with pytest.raises(PathRefused, match="mode 0770"):
        read_result(job, made)
    os.chmod(job.paths.folder, 0o700)
    with pytest.raises(PathRefused, match="not the folder ouro made"):
        read_result(job, None)  # a folder ouro did not make (none recorded)
    other = jobs_folder(tmp_path / "state") / "4243"
    other.mkdir(mode=0o700)
    (other / job.paths.result_pickle.name).write_bytes(planted)
    with pytest.raises(PathRefused, match="not the folder ouro made"):
        read_result(_job(other), made)  # another folder than the one made
    job.paths.result_pickle.unlink()
    job.paths.result_pickle.symlink_to(other / job.paths.result_pickle.name)
    with pytest.raises(PathRefused, match="symbolic link"):
        read_result(job, made)
    os.chmod(job.paths.folder.parent, 0o775)
    with pytest.raises(PathRefused, match="chmod go-w"):
        read_result(job, made)
    assert not marker.exists()


def test_the_jobs_own_result_is_read(tmp_path: Path) -> None:
    job, made = _submitted(tmp_path / "state", 0o022)
    job.paths.result_pickle.write_bytes(pickle.dumps(("success", {"format": "x"})))
    assert read_result(job, made) == ("success", {"format": "x"})
