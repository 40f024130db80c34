"""Measuring what is missing: records on probes/<branch>, resumable, once per digest."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest

from reconciler.engine.probes import sandbox
from reconciler.engine.probes.measure import measure_missing, missing_work
from reconciler.kernel.base.config import LineagePaths
from reconciler.kernel.base.errors import KernelError
from reconciler.spec.probes import ProbeSpec, resolve
from reconciler.state import probes as stored

from .conftest import make_repo

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

COUNT = ("n=$(grep -c '^(defun' organism.el); "
         "printf '{\"defuns\": %d, \"ok\": true}' \"$n\"")


def lineage(tmp_path: Path, generations: int) -> tuple[LineagePaths, list[str]]:
    commits = make_repo(tmp_path / "x.git", generations)
    pygit2.init_repository(str(tmp_path / "x.observations"), bare=False)
    paths = LineagePaths(worktree=tmp_path / "x", git_dir=tmp_path / "x.git",
                         observations=tmp_path / "x.observations", branch="lineage-x",
                         observation_branch="observations/lineage-x", name="x")
    return paths, commits


def probe(script: str = COUNT, name: str = "count") -> ProbeSpec:
    return ProbeSpec.model_validate({"name": name, "run": ["/bin/sh", "-c", script],
                                     "ceilings": {"wall": 20, "cpu": 10}})


def branch_commits(paths: LineagePaths) -> list[str]:
    repo = pygit2.Repository(str(paths.observations))
    ref = repo.references.get(f"refs/heads/probes/{paths.branch}")
    return [c.message.strip() for c in repo.walk(ref.target)] if ref else []


def test_every_generation_is_measured_once_and_recorded(tmp_path: Path) -> None:
    paths, commits = lineage(tmp_path, 3)
    resolved = resolve(probe())
    done = measure_missing(paths, [resolved], parallel=2)
    assert (done.records, done.failures, done.errors) == (3, 0, [])
    found = stored.records(paths)
    assert [(r.generation, r.record["commit"], r.record["metrics"]) for r in found] == [
        (n + 1, commits[n], {"defuns": 3 + n, "ok": True}) for n in range(3)]
    assert {r.digest for r in found} == {resolved.digest}
    assert found[0].probe == {"name": "count", "digest": resolved.digest,
                              "body": resolved.body}
    assert missing_work(paths, [resolved]) == []
    assert measure_missing(paths, [resolved]).records == 0  # nothing twice
    # the observation branch is untouched: records live on their own branch
    repo = pygit2.Repository(str(paths.observations))
    assert repo.references.get("refs/heads/observations/lineage-x") is None
    assert len(branch_commits(paths)) == 3


def test_a_changed_probe_is_a_new_digest_and_old_results_stay(tmp_path: Path) -> None:
    paths, _ = lineage(tmp_path, 2)
    old = resolve(probe())
    assert measure_missing(paths, [old]).errors == []
    new = resolve(probe(COUNT + " # v2"))
    assert new.digest != old.digest
    assert len(missing_work(paths, [old, new])) == 2
    assert measure_missing(paths, [new]).records == 2
    assert stored.coverage(paths) == {old.digest: frozenset({1, 2}),
                                      new.digest: frozenset({1, 2})}
    renamed = resolve(probe(COUNT, name="renamed"))  # a new name is the same measurement
    assert missing_work(paths, [renamed]) == []


def test_a_probe_failure_is_a_record(tmp_path: Path) -> None:
    paths, _ = lineage(tmp_path, 1)
    done = measure_missing(paths, [resolve(probe("echo nope; echo why >&2; exit 2"))])
    assert (done.records, done.failures) == (1, 1)
    (record,) = stored.records(paths)
    assert record.record["failure"] == "exit status 2"
    assert record.record["metrics"] is None and record.record["stderr_tail"] == "why\n"


BACKFILL = """
import sys
from pathlib import Path
from reconciler.engine.probes.measure import measure_missing
from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.probes import ProbeSpec, resolve
root = Path(sys.argv[1])
paths = LineagePaths(worktree=root / "x", git_dir=root / "x.git",
                     observations=root / "x.observations", branch="lineage-x",
                     observation_branch="observations/lineage-x", name="x")
spec = ProbeSpec.model_validate({"name": "count", "run": ["/bin/sh", "-c", sys.argv[2]],
                                 "ceilings": {"wall": 20, "cpu": 10}})
print(measure_missing(paths, [resolve(spec)], parallel=2), flush=True)
"""


def _probe_lock(paths: LineagePaths) -> Path:
    return paths.observations / ".git" / "refs" / "heads" / "probes" / f"{paths.branch}.lock"


@pytest.mark.parametrize("records_before", [0, 1])
def test_a_killed_writers_lock_file_does_not_stop_the_branch(
        tmp_path: Path, records_before: int) -> None:
    """A writer killed between libgit2's lock and its rename leaves the branch's lock
    file; the next writer (alone: the apply lock) removes it and records as usual."""
    paths, _ = lineage(tmp_path, 3)
    resolved = resolve(probe())
    if records_before:
        assert measure_missing(paths, [resolved], only=1).records == 1
    lock = _probe_lock(paths)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("0" * 40 + "\n")  # what libgit2 had written when the writer died
    done = measure_missing(paths, [resolved])
    assert (done.records, done.errors) == (3 - records_before, [])
    assert not lock.exists()
    assert stored.coverage(paths) == {resolved.digest: frozenset({1, 2, 3})}


def test_a_record_that_cannot_be_written_is_said_so_not_blamed_on_the_sandbox(
        tmp_path: Path) -> None:
    paths, _ = lineage(tmp_path, 1)
    lock = _probe_lock(paths)
    lock.mkdir(parents=True)  # not a writer's leftover: left for libgit2 to refuse
    done = measure_missing(paths, [resolve(probe())])
    (error,) = done.errors
    assert error.startswith(f"probe count on gen 1: its record could not be written to "
                            f"{paths.observations}: "), error
    assert "sandbox" not in error and done.records == 0 and lock.is_dir()


def test_a_sandbox_that_cannot_run_is_said_so_and_nothing_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths, _ = lineage(tmp_path, 2)

    def refused(**_: object) -> None:
        raise KernelError("kernel: the probe's cgroup scope could not be made")

    monkeypatch.setattr(sandbox, "measure", refused)
    done = measure_missing(paths, [resolve(probe())])
    (error,) = done.errors  # the first stops the rest
    assert error.startswith("probe count on gen ") and error.endswith(
        ": the sandbox could not run: kernel: the probe's cgroup scope could not be made")
    assert done.records == 0 and stored.coverage(paths) == {}


def test_a_backfill_killed_midway_resumes_with_only_what_is_missing(tmp_path: Path) -> None:
    paths, commits = lineage(tmp_path, 20)
    resolved = resolve(probe())
    def measured() -> int:
        return len(stored.coverage(paths).get(resolved.digest, frozenset()))

    for _attempt in range(2):
        child = subprocess.Popen([sys.executable, "-c", BACKFILL, str(tmp_path), COUNT],
                                 cwd=Path(__file__).resolve().parents[2],
                                 start_new_session=True)
        # killed at a random point once it has recorded one more generation (a kill
        # before any record would leave nothing to resume from)
        start, deadline = measured(), time.monotonic() + 60
        while measured() == start and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(random.uniform(0, 0.3))
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    before = measured()
    assert 0 < before < 20, before  # it progressed, and was cut off
    done = measure_missing(paths, [resolved], parallel=2)
    assert done.errors == [] and done.records == 20 - before
    assert stored.coverage(paths) == {resolved.digest: frozenset(range(1, 21))}
    messages = branch_commits(paths)
    assert len(messages) == 20 and len(set(messages)) == 20  # each generation once
    # each record is its own generation's measurement (gen n has n + 2 defuns)
    assert [(r.generation, r.record["commit"], r.record["metrics"])
            for r in stored.records(paths)] == [
        (n + 1, commits[n], {"defuns": 3 + n, "ok": True}) for n in range(20)]


@pytest.mark.slow  # 200 generations measured, killed three times on the way
def test_a_backfill_of_200_generations_killed_at_random_points_measures_each_once(
        tmp_path: Path) -> None:
    paths, commits = lineage(tmp_path, 200)
    resolved = resolve(probe())
    seen = [0]
    for _kill in range(3):
        child = subprocess.Popen([sys.executable, "-c", BACKFILL, str(tmp_path), COUNT],
                                 cwd=Path(__file__).resolve().parents[2],
                                 start_new_session=True)
        # killed at a random point once it has measured a few more (a host fast enough to
        # measure all 200 between two looks is not one this test can cut off: it says so)
        target = seen[-1] + random.randint(1, 40)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None and len(
                stored.coverage(paths).get(resolved.digest, frozenset())) < target:
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):  # it ended by itself: its group is gone
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        seen.append(len(stored.coverage(paths).get(resolved.digest, frozenset())))
    assert seen == sorted(seen) and seen[-1] < 200, seen  # it progressed, and was cut off
    done = measure_missing(paths, [resolved], parallel=2)
    assert done.errors == [] and done.records == 200 - seen[-1]
    assert stored.coverage(paths) == {resolved.digest: frozenset(range(1, 201))}
    messages = branch_commits(paths)
    assert len(messages) == 200 and len(set(messages)) == 200  # each generation once
    found = stored.records(paths)
    assert [(r.generation, r.record["commit"]) for r in found] == [
        (n + 1, commits[n]) for n in range(200)]
    assert [r.record["metrics"]["defuns"] for r in found] == [3 + n for n in range(200)]
