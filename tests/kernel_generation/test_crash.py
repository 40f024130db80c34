"""Crash safety: a real generation (bwrap, cgroup1, broker) SIGKILLed at every named
point, then ``recover``; the two repositories must agree again, nothing committed lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from reconciler.kernel.sandbox.ceilings import PARENT
from reconciler.kernel.transaction import publish, recovery
from reconciler.kernel.transaction.generation import KILL_POINT_ENV, KILL_POINTS, run_generation
from reconciler.kernel.transaction.recovery import recover
from reconciler.state import summaries
from reconciler.state.audit import audit_lineage
from tests.conftest import REPO_ROOT
from tests.kernel_generation.helpers import (
    REAL_CEILINGS,
    Lineage,
    git,
    needs_real_host,
    replay_model,
    seed_text,
    subjects,
)

pytestmark = [needs_real_host, pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from reconciler.kernel.base.config import Identity, LineagePaths, ModelConfig
    from reconciler.kernel.transaction.generation import run_generation
    from tests.kernel_generation.helpers import REAL_CEILINGS
    root, commit, fingerprint, replay = Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    paths = LineagePaths(root / "lin", root / "lin.git", root / "lin.observations",
                         "lineage-test", "observations/lineage-test")
    identity = Identity("https://example.invalid/ouro.git", "main", commit, fingerprint)
    model = ModelConfig(provider="replay", name="replay-test", replay_dir=Path(replay))
    print(run_generation(paths=paths, identity=identity, model=model,
                         ceilings=REAL_CEILINGS, api_key=None))
    """
)

EXPECTED = {
    "after-external-edit": ("none", 1),
    "after-sandbox": ("discarded", 1),
    "after-lineage-object": ("discarded", 1),
    "after-observation-commit": ("rolled-forward", 2),
    "after-branch-move": ("cleaned-up", 2),
    "mid-worktree-write": ("cleaned-up", 2),
    "before-marker-removal": ("cleaned-up", 2),
}


def child(born: Lineage, replay: Path, *, kill_point: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.pop(KILL_POINT_ENV, None)
    if kill_point is not None:
        env[KILL_POINT_ENV] = kill_point
    root = born.worktree.parent
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(REPO_ROOT), str(root), born.identity.commit,
         born.identity.fingerprint, str(replay)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def assert_consistent(born: Lineage) -> int:
    """N generation commits, N observations each naming its commit, clean worktrees."""
    gens = [line.split(" ", 1) for line in
            git(born.worktree, "log", "--first-parent", "--format=%H %s").splitlines()
            if line.split(" ", 1)[1].startswith("gen ")][::-1]
    listing = git(born.observations, "ls-tree", "--name-only", "HEAD", "generations/")
    assert len(listing.split()) == len(gens)
    for number, (commit, subject) in enumerate(gens, start=1):
        assert subject.startswith(f"gen {number}: ")
        assert born.observation(number)["lineage_commit"] == commit
    assert git(born.worktree, "status", "--porcelain", "--ignored") == ""
    assert git(born.observations, "status", "--porcelain") == ""
    assert not publish.marker_path(born.paths).exists()
    private = Path(born.paths.git_dir) / publish.PRIVATE_DIR
    assert not private.exists() or list(private.iterdir()) == []
    scopes = Path("/sys/fs/cgroup/memory") / PARENT
    mine = recovery.scope_prefix(born.paths) + "*"
    assert not list(scopes.glob(mine)), "a cgroup of the killed attempt was left"
    return len(gens)


@pytest.fixture
def replay(tmp_path: Path) -> Path:
    seed = seed_text()
    return replay_model(tmp_path / "replies", [seed + f";; v{i}\n" for i in range(1, 5)]
                        ).replay_dir or tmp_path


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_at_each_point_then_recover(born: Lineage, replay: Path, point: str) -> None:
    first = child(born, replay, kill_point=None)
    assert first.wait(120) == 0, first.stderr.read() if first.stderr else ""
    if point == "after-external-edit":
        (born.worktree / "human.txt").write_text("a human's edit\n")
    committed_before = set(git(born.worktree, "rev-list", "--all").split())

    proc = child(born, replay, kill_point=point)
    assert proc.wait(120) == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""

    report = recover(born.paths)
    action, generations = EXPECTED[point]
    assert (report.action, assert_consistent(born)) == (action, generations)
    reachable = set(git(born.worktree, "rev-list", "--all").split())
    assert committed_before <= reachable  # nothing committed is lost
    if point == "after-external-edit":
        assert subjects(born.worktree)[-1] == "external edit"
        assert (born.worktree / "human.txt").read_text() == "a human's edit\n"
    if action == "discarded":
        assert report.interrupted_record is not None
        record = json.loads(git(born.observations, "show", f"HEAD:{report.interrupted_record}"))
        assert record["generation"] == 2
        assert [c["http_status"] for c in record["model_calls"]] == [200]
        assert git(born.observations, "log", "-1", "--format=%s").strip() == (
            "observe: interrupted gen 2 (discarded)")

    again = recover(born.paths)
    assert again.action == "none"
    assert assert_consistent(born) == generations

    proc = child(born, replay, kill_point=None)
    assert proc.wait(120) == 0, proc.stderr.read() if proc.stderr else ""
    assert assert_consistent(born) == generations + 1
    # a discarded attempt's reply is not consumed: the re-run gets the same one
    assert born.organism() == seed_text() + f";; v{generations + 1}\n"
    # the running totals (physics release 4) survive the kill and its recovery: the next
    # generation's agree with every record, a discarded attempt's spend added by status
    assert born.observation(generations + 1)["running_totals"]["generations"] == (
        generations + 1)
    assert summaries._recorded_totals(born.paths, (None, None)) == summaries.totals_of(
        summaries.summarize(born.paths))
    assert "running-totals-mismatch" not in {
        finding.code for finding in audit_lineage(born.paths, "test").findings}


def test_killed_while_the_organism_runs(born: Lineage, tmp_path: Path) -> None:
    replay = replay_model(tmp_path / "replies", []).replay_dir or tmp_path
    (born.worktree / "organism.el").write_text(
        '(write-region "x" nil "/work/started")\n(sleep-for 30)\n')
    proc = child(born, replay, kill_point=None)
    deadline = time.monotonic() + 20
    while not publish.marker_path(born.paths).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)  # the organism is in its sleep now
    proc.kill()
    proc.wait()
    report = recover(born.paths)
    assert report.action == "discarded"
    assert assert_consistent(born) == 0
    assert subjects(born.worktree) == ["seed", "external edit"]
    assert not (born.worktree / "started").exists()


def test_recover_refuses_while_the_generation_still_runs(born: Lineage, tmp_path: Path) -> None:
    replay = replay_model(tmp_path / "replies", []).replay_dir or tmp_path
    (born.worktree / "organism.el").write_text("(sleep-for 30)\n")
    proc = child(born, replay, kill_point=None)
    try:
        deadline = time.monotonic() + 20
        while not publish.marker_path(born.paths).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        from reconciler.kernel.base.errors import RecoveryError

        with pytest.raises(RecoveryError, match="still running"):
            recover(born.paths)
    finally:
        proc.kill()
        proc.wait()
    assert recover(born.paths).action == "discarded"


def test_recover_on_a_healthy_lineage_is_a_no_op(born: Lineage, tmp_path: Path) -> None:
    replay = replay_model(tmp_path / "replies", [seed_text()]).replay_dir or tmp_path
    from reconciler.kernel.base.config import ModelConfig

    run_generation(paths=born.paths, identity=born.identity,
                   model=ModelConfig(provider="replay", name="r", replay_dir=replay),
                   ceilings=REAL_CEILINGS, api_key=None)
    before = git(born.worktree, "rev-parse", "HEAD"), git(born.observations, "rev-parse", "HEAD")
    assert recover(born.paths).action == "none"
    after = git(born.worktree, "rev-parse", "HEAD"), git(born.observations, "rev-parse", "HEAD")
    assert before == after
