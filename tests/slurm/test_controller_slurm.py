"""`ouro controller --executor slurm` on the suite's own single-node Slurm: each pass
submits a job per lineage that misses generations; a raise committed to the spec
repository is picked up by the next pass and run as a new job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apply.helpers import assert_invariant
from tests.controller.harness import Running, SpecRepo, events, spec_text
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slurm, pytest.mark.slow]

EXECUTOR = "  executor:\n    slurm: {time: 10m}\n"


def test_the_controller_runs_its_lineages_as_slurm_jobs(tmp_path: Path,
                                                       env: dict[str, str]) -> None:
    spec_repo = SpecRepo(tmp_path)
    state = tmp_path / "state"
    spec_repo.commit("alpha", {"alpha.yaml": spec_text("alpha", 1) + EXECUTOR})
    running = Running(spec_repo.bare, state, "--executor", "slurm", env=env)
    try:
        running.wait(lambda: running.condition("alpha", "Ready").get("status") == "True",
                     "alpha's first job", timeout=300)
        raised = spec_repo.commit("raise", {"alpha.yaml": spec_text("alpha", 2) + EXECUTOR})
        running.wait(lambda: running.status()["controller"]["revision"] == raised
                     and running.lineage("alpha").get("generations") == 2
                     and running.condition("alpha", "Ready").get("status") == "True",
                     "the raise run as a second job", timeout=300)
    finally:
        assert running.stop() == 0, running.output()
    assert_invariant(lineage_paths(state, "alpha"), 2)
    submitted = [e for e in events(state) if e["event"] == "job-submitted"]
    assert [e["lineage"] for e in submitted] == ["alpha", "alpha"], json.dumps(submitted)
    ran = [e for e in events(state) if e["event"] == "generation"]
    assert [e["generation"] for e in ran] == [1, 2]
    assert {e["executor_job"] for e in ran} == {e["executor_job"] for e in submitted}
