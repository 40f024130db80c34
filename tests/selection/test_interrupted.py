"""A selection step interrupted between its record and its forks (issue 39, crash-safe):
the record of epoch 1 was written into one candidate's observations only, nothing was
born; the next apply finishes the population with the decision the plan showed. And a
real SIGKILL of the apply during its selection step."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine.epochs import read_record, write_record
from reconciler.engine.fleet import Fleet
from reconciler.engine.selection import selections, table_reader
from reconciler.engine.selection_records import evidence
from reconciler.spec.load import default_places
from tests.apply.helpers import ouro_argv, run_ouro
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


def _first_record(state: Path) -> dict[str, Any] | None:
    for index in range(4):
        name = f"pop-{index}"
        if (state / f"{name}.git").is_dir():
            found = read_record(default_places(state / name, name), "pop", 1)
            if found is not None:
                return found
    return None


def test_sigkill_during_the_selection_step_then_apply_completes_the_same_decision(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    """A real SIGKILL of `ouro apply` (its whole process group) at a random point after
    the first decision record is written (while the others are written, the forks born,
    or epoch 2 runs): the next apply completes the population, every candidate holds the
    decision first written, the forks are born of its kept members, verify is clean."""
    _write(specs, SMALL)
    state = tmp_path / "state"
    process = subprocess.Popen(ouro_argv("apply", "--yes", str(specs)), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline, first = time.monotonic() + 240, None
    while first is None and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
        first = _first_record(state)
    time.sleep(random.uniform(0, 0.3))
    with contextlib.suppress(ProcessLookupError):  # it ended by itself: its group is gone
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert first is not None, "the apply ended or timed out before any decision record"
    finished = run_ouro("apply", "--yes", str(specs), env=env)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    for index in range(4):
        name = f"pop-{index}"
        record = read_record(default_places(state / name, name), "pop", 1)
        assert record is not None, name
        for key in ("kept", "stopped", "born", "values"):
            assert record[key] == first[key], (name, key)
    members = sorted(p.name for p in state.iterdir() if (state / f"{p.name}.git").is_dir())
    assert members == ["pop-0", "pop-1", "pop-2", "pop-3", "pop-e2-0", "pop-e2-1"]
    assert {born["parent"] for born in first["born"]} <= set(first["kept"])
    assert run_ouro("verify", str(specs), env=env).returncode == 0
    assert run_ouro("plan", str(specs), env=env).returncode == 0  # in sync
