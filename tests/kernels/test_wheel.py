"""A wheel-installed ouro (no git checkout anywhere) extends a lineage that an earlier
wheel, of another kernel, was born under: through the kernel store."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apply.helpers import write_spec
from tests.host import require
from tests.kernels.checkout import (
    MAIN,
    change_kernel,
    commit,
    environment,
    git,
    make_checkout,
    observation,
    root_metadata,
)
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]


def _install(checkout: Path, target: Path, tmp_path: Path) -> Path:
    """Build the checkout's wheel and install it (no dependencies: this interpreter's)."""
    wheels = tmp_path / f"wheels-{target.name}"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
         str(checkout)], capture_output=True, text=True, timeout=600,
        env=environment(tmp_path / "unused"))
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("ouro_lineages-*.whl")
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert not (target / ".git").exists()
    return target


def _ouro(site: Path, work: Path, env: dict[str, str],
          *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=work,
                          env={**env, "PYTHONPATH": str(site)}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)


def test_a_wheel_extends_what_an_earlier_wheel_began(tmp_path: Path) -> None:
    require(shutil.which("bwrap") is not None and shutil.which("git") is not None,
            "needs bubblewrap and git")
    source = make_checkout(tmp_path / "ouro")
    c1 = git(source, "rev-parse", "HEAD")
    first = _install(source, tmp_path / "site1", tmp_path)
    change_kernel(source, "C2")
    c2 = commit(source, "C2: the seed organism changes")
    second = _install(source, tmp_path / "site2", tmp_path)
    shutil.rmtree(source)  # no checkout, no objects: only the store can have C1's kernel
    for site, expected in ((first, c1), (second, c2)):
        recorded = site / "reconciler" / "state" / "_build_commit.txt"  # setup.py's record
        assert recorded.read_text().strip() == expected

    work = tmp_path / "elsewhere"
    (work / "specs").mkdir(parents=True)
    state = tmp_path / "state"
    env = environment(state)
    write_spec(work / "specs", "w", 1)
    done = _ouro(first, work, env, "apply", "--yes", "specs/")
    assert done.returncode == 0, done.stdout + done.stderr
    born = root_metadata(lineage_paths(state, "w").git_dir, "lineage-w")
    assert born["instrument_commit"] == c1

    write_spec(work / "specs", "w", 2)
    done = _ouro(second, work, env, "apply", "--yes", "--json", "specs/")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["lineages"][0]["generations_run"] == 1
    kernel = observation(lineage_paths(state, "w").observations, 2)["ran_with"]["kernel"]
    assert (kernel["commit"], kernel["fingerprint"], kernel["source"]) == (
        c1, born["instrument_fingerprint"], "store")
    ran = observation(lineage_paths(state, "w").observations, 2)["ran_with"]
    assert ran["control_plane"]["ouro_commit"] == c2
