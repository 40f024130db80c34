"""A full disk under a lineage's git dir names the remedy (issue 36, item 10): the kernel
cannot store the worktree's files ("cannot read the worktree ... No space left on
device"), and what apply reports says what to do about it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apply.helpers import run_ouro, write_spec
from tests.host import require

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of the test's own, unmounted afterwards."""
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "needs root to mount")
    place = tmp_path / "small"
    place.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "ouro-test-gitdir",
                    str(place)], check=True)
    try:
        yield place
    finally:
        subprocess.run(["umount", "-l", str(place)], check=False)


def test_a_full_git_dir_names_the_remedy(tmp_path: Path, env: dict[str, str], specs: Path,
                                         small_disk: Path) -> None:
    spec = write_spec(specs, "alpha", 1)
    spec.write_text(spec.read_text() + f"  storage:\n    path: {tmp_path / 'alpha'}\n"
                    f"    git_dir: {small_disk / 'alpha.git'}\n")
    first = run_ouro("apply", "--yes", str(specs), env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    # an external edit the git dir has no room for: 6 MiB that do not compress
    (tmp_path / "alpha" / "data.bin").write_bytes(os.urandom(6 << 20))
    spec.write_text(spec.read_text().replace("generations: 1", "generations: 2"))
    done = run_ouro("apply", "--yes", str(specs), env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "no space left on device" in out.lower(), out
    lines = [line for line in out.splitlines() if "no space left on device" in line.lower()]
    assert all("free space" in line for line in lines), lines
    assert "internal error" not in out, out
