"""`ouro controller` runs a selected LineageSet epoch after epoch (docs/selection.md), as
`ouro apply` does: at the end of an epoch it records the decision, loads the set's new
members and runs them, until the last epoch; the decision verifies, nothing is left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.engine.epochs import read_record
from reconciler.spec.load import default_places
from tests.apply.helpers import run_ouro
from tests.controller.harness import Running, SpecRepo
from tests.selection.test_population import POP, SCORE

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

SMALL = POP.replace("replicas: 8", "replicas: 4").replace("keep: 4", "keep: 2") \
    .replace("epochs: 3", "epochs: 2")
MEMBERS = ["pop-0", "pop-1", "pop-2", "pop-3", "pop-e2-0", "pop-e2-1"]


def test_the_controller_runs_every_epoch_of_a_selected_set(
        spec_repo: SpecRepo, state: Path, env: dict[str, str]) -> None:
    (spec_repo.work / "specs" / "probes" / "score").mkdir(parents=True)
    spec_repo.commit("a population", {"pop.yaml": SMALL, "probes/score/score.sh": SCORE})
    running = Running(spec_repo.bare, state, interval="1s", env=env)
    try:
        running.wait(lambda: all(running.condition(name, "Ready").get("status") == "True"
                                 for name in MEMBERS), "every member of both epochs ready",
                     timeout=300)
    finally:
        assert running.stop() == 0, running.output()
    assert "its next epoch runs now" in running.output()
    record = read_record(default_places(state / "pop-0", "pop-0"), "pop", 1)
    assert record is not None and len(record["kept"]) == 2 and len(record["born"]) == 2
    assert {born["parent"] for born in record["born"]} <= set(record["kept"])
    assert sorted(p.stem for p in state.glob("pop-*.git")) == MEMBERS
    checkout = spec_repo.work / "specs"
    local = {**env, "OURO_STATE_DIR": str(state)}
    planned = run_ouro("plan", "--json", str(checkout), env=local)
    assert planned.returncode == 0, planned.stdout + planned.stderr  # in sync: all epochs run
    assert not json.loads(planned.stdout).get("selection")  # the last epoch decides nothing
    assert run_ouro("verify", str(checkout), env=local).returncode == 0
