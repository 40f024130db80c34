"""A selection step interrupted between its record and its forks (issue 39, crash-safe):
the record of epoch 1 was written into one candidate's observations only, nothing was
born; the next apply finishes the population with the decision the plan showed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.engine.epochs import read_record, write_record
from reconciler.engine.fleet import Fleet
from reconciler.engine.selection import selections, table_reader
from reconciler.engine.selection_records import evidence
from reconciler.spec.load import default_places
from tests.apply.helpers import run_ouro
from tests.selection.test_population import POP, _write

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

SMALL = POP.replace("replicas: 8", "replicas: 4").replace("keep: 4", "keep: 2") \
    .replace("epochs: 3", "epochs: 2")


def test_a_record_without_its_forks_is_finished_by_the_next_apply(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    path = _write(specs, SMALL)
    first = run_ouro("apply", "--yes", "--max-generations", "8", str(specs), env=env)
    assert first.returncode in (0, 1, 3), first.stdout + first.stderr
    planned = run_ouro("plan", "--json", str(specs), env=env)
    shown = json.loads(planned.stdout)["selection"][0]
    assert shown["epoch"] == 1 and not shown["waits_for"], shown
    state = tmp_path / "state"
    fleet = Fleet(state)
    loaded = fleet.load([path])
    (chosen,) = selections(loaded, table_reader(fleet, [path]), state)
    places = {spec.name: spec.paths() for spec in loaded}
    document = {**chosen.as_json(), "candidates": evidence(chosen.candidates, places)}
    write_record(places["pop-3"], "pop", document)  # the kill: one record, no fork
    assert not (state / "pop-e2-0.git").exists()
    finished = run_ouro("apply", "--yes", str(specs), env=env)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    record = read_record(default_places(state / "pop-3", "pop-3"), "pop", 1)
    assert record is not None
    for key in ("kept", "stopped", "born", "values"):
        assert record[key] == shown[key], key  # the decision the plan showed
    members = sorted(p.name for p in state.iterdir() if (state / f"{p.name}.git").is_dir())
    assert members == ["pop-0", "pop-1", "pop-2", "pop-3", "pop-e2-0", "pop-e2-1"]
    assert run_ouro("verify", str(specs), env=env).returncode == 0
