"""A full disk or a closed pipe on an output is a named host fault with its remedy, exit 1,
never "internal error ... a bug in ouro" (issue 23)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apply.helpers import REPO_ROOT, ouro_argv, run_ouro, write_spec
from tests.host import require
from tests.observe.builder import LineageBuilder

FULL = "no space left on device"


def _run(*args: str, env: dict[str, str], stdout: int) -> tuple[int, str]:
    done = subprocess.run(ouro_argv(*args), cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120)
    return done.returncode, done.stderr


def _no_bug(stderr: str) -> None:
    assert "internal error" not in stderr and "bug in ouro" not in stderr, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


@pytest.fixture
def lineage_env(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    builder = LineageBuilder(tmp_path / "state", "alpha")
    for _ in range(3):
        builder.gen("no-change")
    return env


@pytest.mark.parametrize("args", [("log", "alpha", "--json"), ("export", "alpha"),
                                  ("status",), ("schema",)])
def test_a_full_disk_under_stdout_is_a_host_fault(lineage_env: dict[str, str],
                                                  args: tuple[str, ...]) -> None:
    with open("/dev/full", "w") as full:
        code, stderr = _run(*args, env=lineage_env, stdout=full.fileno())
    assert code == 1, stderr
    assert f"host fault while writing its output: {FULL}: free space" in stderr, stderr
    _no_bug(stderr)


def test_a_closed_pipe_is_a_host_fault(lineage_env: dict[str, str]) -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        code, stderr = _run("log", "alpha", "--json", env=lineage_env, stdout=write)
    finally:
        os.close(write)
    assert code == 1, stderr
    assert "closed pipe" in stderr and "keep the reader open" in stderr, stderr
    _no_bug(stderr)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of the test's own, filled to the last block."""
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "needs root to mount")
    place = tmp_path / "full"
    place.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "ouro-test-full",
                    str(place)], check=True)
    try:
        with open(place / "filler", "wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError:
                pass
        yield place
    finally:
        subprocess.run(["umount", "-l", str(place)], check=False)


def test_export_o_on_a_full_disk_is_a_host_fault(lineage_env: dict[str, str],
                                                 full_disk: Path) -> None:
    done = run_ouro("export", "alpha", "-o", str(full_disk / "table.csv"), env=lineage_env)
    assert done.returncode == 1, done.stderr
    assert FULL in done.stderr and "free space" in done.stderr, done.stderr
    _no_bug(done.stderr)
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # no temporary left


@pytest.mark.parametrize("parallel", ["1", "2"])
def test_apply_onto_a_full_disk_names_it_at_any_parallel(
        tmp_path: Path, env: dict[str, str], specs: Path, full_disk: Path,
        parallel: str) -> None:
    for name in ("alpha", "beta"):
        write_spec(specs, name, 1, storage=str(full_disk / name))
    done = run_ouro("apply", "--yes", "--parallel", parallel, str(specs), env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    for name in ("alpha", "beta"):
        said = (f"  error: ouro: host fault while writing the lock holder record of "
                f"lineage {name} ({full_disk / name}.git.ouro-lock.json): {FULL}: free "
                "space")
        assert said in done.stdout, out  # in the summary, said once (issue 22)
        assert out.count(f"lineage {name} ({full_disk / name}.git.ouro-lock.json)") == 1, out
    _no_bug(out)
