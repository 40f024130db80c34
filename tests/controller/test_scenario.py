"""The issue's scenario against a real spec repository, real sandboxes, a real controller.

Create a lineage, raise its generations, commit a broken spec (reported with its
file:line and commit, nothing of it applied, the good lineage keeps going), fix it,
suspend one, remove one (orphaned, nothing deleted).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.apply.helpers import assert_invariant, run_ouro
from tests.controller.harness import Running, SpecRepo, events, spec_text
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]


def _generations(running: Running, name: str) -> int:
    return int(running.lineage(name).get("generations") or 0)


def test_create_raise_break_fix_suspend_remove(spec_repo: SpecRepo, state: Path,
                                               env: dict[str, str]) -> None:
    spec_repo.commit("alpha", {"alpha.yaml": spec_text("alpha", 1)})
    running = Running(spec_repo.bare, state, env=env)
    try:
        running.wait(lambda: running.condition("alpha", "Ready").get("status") == "True",
                     "alpha created and ready")
        assert _generations(running, "alpha") == 1

        raised = spec_repo.commit("raise alpha", {"alpha.yaml": spec_text("alpha", 3)})
        running.wait(lambda: running.status()["controller"]["revision"] == raised,
                     "the raise adopted")
        running.wait(lambda: _generations(running, "alpha") == 3
                     and running.condition("alpha", "Ready").get("status") == "True",
                     "alpha raised to 3")

        broken = spec_repo.commit("broken beta", {
            "alpha.yaml": spec_text("alpha", 4),
            "beta.yaml": spec_text("beta", 1).replace("generations: 1", "generations: lots")})
        bad = running.wait(lambda: running.status()["controller"].get("bad_commit"),
                           "the bad commit reported")
        assert bad["commit"] == broken
        assert "specs/beta.yaml:6:" in bad["message"], bad
        assert running.status()["controller"]["revision"] == raised
        assert f"bad commit {broken[:12]}" in running.output()
        assert "specs/beta.yaml:6:" in running.output()
        # nothing of it: alpha stays at the good revision's 3, beta does not exist
        running.wait(lambda: running.status()["controller"]["seen"] == broken, "seen")
        assert not lineage_paths(state, "beta").git_dir.exists()
        assert _generations(running, "alpha") == 3

        fixed = spec_repo.commit("fix beta", {"beta.yaml": spec_text("beta", 1)})
        running.wait(lambda: running.status()["controller"]["revision"] == fixed, "the fix")
        assert running.status()["controller"]["bad_commit"] is None
        running.wait(lambda: running.condition("beta", "Ready").get("status") == "True"
                     and _generations(running, "alpha") == 4, "beta made, alpha at 4")

        suspended = spec_repo.commit("suspend alpha", {
            "alpha.yaml": spec_text("alpha", 6, suspend=True)})
        running.wait(lambda: running.status()["controller"]["revision"] == suspended,
                     "the suspension adopted")
        running.wait(lambda: running.condition("alpha", "Suspended").get("status") == "True",
                     "alpha suspended")
        assert running.condition("alpha", "Progressing")["status"] == "False"
        plan = run_ouro("plan", str(state / ".controller" / "cache" / "specs" / "specs"),
                        env=env)
        assert "suspended" in plan.stdout, plan.stdout

        removed = spec_repo.commit("remove beta", {"beta.yaml": None})
        running.wait(lambda: running.status()["controller"]["revision"] == removed, "removal")
        running.wait(lambda: running.lineage("beta").get("orphaned") is True, "beta orphaned")
        assert running.condition("beta", "Ready")["reason"] == "orphaned"
        assert lineage_paths(state, "beta").git_dir.is_dir()  # nothing deleted
        assert _generations(running, "alpha") == 4  # suspended: none started since
    finally:
        assert running.stop() == 0, running.output()
    assert "ouro controller: stopped" in running.output()
    assert_invariant(lineage_paths(state, "alpha"), 4)
    assert_invariant(lineage_paths(state, "beta"), 1)
    numbers = [(e["lineage"], e["generation"]) for e in events(state)
               if e["event"] == "generation"]
    assert sorted(numbers) == sorted(set(numbers))  # no generation twice
    status = run_ouro("status", "--state-dir", str(state), env=env)
    assert status.returncode == 0, status.stderr
