"""Shared test fixtures: real git repositories, the shared fixtures, CI rules.

Under CI (``CI`` set; `.ci/run` sets it itself) a skipped test is a failure: the
sandbox and cgroup tests must really run there. So is an expected failure (``xfail``,
whether it fails or passes): CI runs every test for what it asserts.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_COMMIT = "5" * 40


def shared_dir() -> Path:
    for candidate in (REPO_ROOT.parent / "shared", Path("/work/shared")):
        if (candidate / "fixtures").is_dir():
            return candidate
    pytest.fail("../shared/fixtures is missing: the fixture lineages are needed")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under the test command's ``-n 2 --dist loadgroup`` (pytest-xdist) a session fixture
    is made once per worker that uses it: the Slurm tests share one worker and so one
    cluster (tests/slurm/conftest.py), the tests of the grown fleet (tests/history/fleet.py,
    a dozen real applies) one fleet. The Slurm tests come first: the longest group starts
    at once while the other worker takes everything else."""
    for item in items:
        if item.get_closest_marker("slurm") is not None:
            item.add_marker(pytest.mark.xdist_group("slurm"))
        elif "grown_fleet" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("fleet"))
    items.sort(key=lambda item: item.get_closest_marker("slurm") is None)  # stable


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not os.environ.get("CI"):
        return
    if hasattr(report, "wasxfail"):
        reason = report.wasxfail or "no reason given"
        report.outcome = "failed"
        report.longrepr = (f"marked xfail ({reason}); under CI, which must run every test "
                           "for what it asserts, an expected failure is a failure: fix the "
                           f"code or the test. {report.longrepr or ''}")
        del report.wasxfail
    elif report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, which must run every test: {report.longrepr}"


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every test runs as a known instrument with its own state dir."""
    monkeypatch.setenv("OURO_INSTRUMENT_COMMIT", TEST_COMMIT)
    monkeypatch.setenv("OURO_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def _child_pids() -> set[int]:
    """This process's children now, from /proc (one not reaped stays there as a zombie)."""
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"{entry.path}/stat", encoding="utf-8", errors="replace") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == os.getpid():
                found.add(int(entry.name))
    return found


@pytest.fixture
def new_children() -> Callable[[], set[int]]:
    """The children this process has now and had not when the test began (other tests'
    servers may still run in this worker); ``tests.host.Children`` names its type."""
    before = _child_pids()
    return lambda: _child_pids() - before


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of an ``ouro`` subprocess: this test's own state dir."""
    return {**os.environ, "OURO_STATE_DIR": str(tmp_path / "state")}


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    """An empty folder for the test's spec files."""
    folder = tmp_path / "specs"
    folder.mkdir()
    return folder


def _git(*args: str, cwd: Path | None = None) -> None:
    """Tests may use git itself to restore bundles; ouro never does."""
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def sample_lineage(tmp_path: Path) -> Path:
    """The old instrument's sample: 5 generations among 10 commits, no metadata."""
    target = tmp_path / "sample"
    _git("clone", "-q", str(shared_dir() / "fixtures" / "sample-lineage.bundle"), str(target))
    return target


@pytest.fixture
def original_lineage(tmp_path: Path) -> Path:
    """The current original instrument's complete lineage; returns the worktree path.

    Its places: ``fixture``, ``fixture.git``, ``fixture.observations`` under tmp_path.
    """
    fixtures = shared_dir() / "fixtures"
    worktree = tmp_path / "fixture"
    _git(
        "clone", "-q", f"--separate-git-dir={tmp_path / 'fixture.git'}", "-b", "lineage-fixture",
        str(fixtures / "original-lineage.bundle"), str(worktree),
    )
    _git(
        "clone", "-q", "-b", "observations/lineage-fixture",
        str(fixtures / "original-observations.bundle"), str(tmp_path / "fixture.observations"),
    )
    return worktree
