"""What a selected set looks like after its epochs (issue 39, "Seen"): the table's
``epoch`` column (export, log, compare), the members a decision stopped shown stopped
``not-selected`` by status, plan and log, and status's epochs (current epoch of N, the
living members, best and mean of ``by`` per epoch). One real apply of 4 replicas,
every: 2, epochs: 2, truncation keep: 2; every expected value is read from the records
(the decision's and the probes'), never from the output checked."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path
from statistics import mean
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats

from reconciler.engine.epochs import read_record
from reconciler.spec.load import default_places
from tests.apply.helpers import run_ouro
from tests.selection.test_interrupted import SMALL
from tests.selection.test_population import _recorded_value, _write

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

ORIGINALS = [f"pop-{i}" for i in range(4)]


@pytest.fixture(scope="module")
def population(tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, dict[str, str], dict[str, Any]]:
    """The applied set: (its specs folder, the environment, the decision of epoch 1)."""
    root = tmp_path_factory.mktemp("shown")
    specs = root / "specs"
    specs.mkdir()
    _write(specs, SMALL)
    env = {**os.environ, "OURO_STATE_DIR": str(root / "state")}
    applied = run_ouro("apply", "--yes", str(specs), env=env, timeout=900)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    record = read_record(default_places(root / "state" / "pop-0", "pop-0"), "pop", 1)
    assert record is not None and len(record["stopped"]) == 2 and len(record["born"]) == 2
    return specs, env, record


def _expected_epoch(name: str, generation: int) -> int:
    """By hand: the original members' gens 1-2 ran in epoch 1, 3-4 in epoch 2; a member
    born into epoch 2 ran its gens 1-2 there; a seed is in the epoch it was born into."""
    if name.startswith("pop-e2-"):
        return 2
    return 1 if generation <= 2 else 2


def test_export_has_the_epoch_each_generation_ran_in(
        population: tuple[Path, dict[str, str], dict[str, Any]]) -> None:
    specs, env, record = population
    exported = run_ouro("export", "pop", "--specs", str(specs), "--format", "csv", env=env)
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    columns = list(rows[0])
    assert columns[columns.index("orphaned") + 1] == "epoch"  # docs/export.md's order
    seen: dict[str, list[tuple[int, int]]] = {}
    for row in rows:
        seen.setdefault(row["lineage"], []).append((int(row["generation"]), int(row["epoch"])))
    kept, stopped = record["kept"], record["stopped"]
    born = [b["name"] for b in record["born"]]
    assert sorted(seen) == sorted(ORIGINALS + born)
    for name, pairs in seen.items():
        last = 4 if name in kept else 2
        assert [g for g, _ in pairs] == list(range(last + 1)), name
        assert all(epoch == _expected_epoch(name, g) for g, epoch in pairs), (name, pairs)
    assert all(max(g for g, _ in seen[name]) == 2 for name in stopped)
    lines = run_ouro("export", "pop", "--specs", str(specs), "--format", "jsonl", env=env)
    assert {json.loads(line)["epoch"] for line in lines.stdout.splitlines()} == {1, 2}


def _ci(by_name: dict[str, float]) -> dict[str, float | None]:
    """The 95% CI of the mean the way `ouro compare` states it makes it (BCa, 9,999
    resamples, seed 38, the values in their members' names' order), computed here by
    scipy directly; equal values: that one point."""
    values = [by_name[name] for name in sorted(by_name)]
    if len(set(values)) == 1:
        return {"ci_low": values[0], "ci_high": values[0]}
    found = scipy_stats.bootstrap((np.array(values, dtype=np.float64),), np.mean,
                                  n_resamples=9999, confidence_level=0.95, method="BCa",
                                  rng=np.random.default_rng(38)).confidence_interval
    return {"ci_low": float(found.low), "ci_high": float(found.high)}


def test_status_shows_not_selected_and_the_epochs(
        population: tuple[Path, dict[str, str], dict[str, Any]]) -> None:
    specs, env, record = population
    state = Path(env["OURO_STATE_DIR"])
    shown = run_ouro("status", "--json", str(specs), env=env)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    sets = {line["name"]: line["set"] for line in document["lineages"]}
    for name in record["stopped"]:
        stop = sets[name]["not_selected"]
        assert stop["reason"] == "not-selected" and stop["epoch"] == 1, stop
        assert stop["value"] == record["values"][name] and stop["generation"] == 2
    living = sorted(record["kept"] + [b["name"] for b in record["born"]])
    assert all(sets[name]["not_selected"] is None for name in living)
    assert {name: sets[name]["born_epoch"] for name in sets} == {
        name: 2 if name.startswith("pop-e2-") else 1 for name in sets}
    (epochs,) = document["selection"]
    assert (epochs["set"], epochs["epoch"], epochs["epochs"]) == ("pop", 2, 2)
    assert epochs["living"] == living
    first_named = dict(record["values"])
    second_named = {name: _recorded_value(state, name, 4 if name in record["kept"] else 2)
                    for name in living}  # each living member's last generation of epoch 2
    first, second = list(first_named.values()), list(second_named.values())
    assert epochs["fitness"] == [
        {"epoch": 1, "measured": 4, "best": max(first), "mean": mean(first),
         **_ci(first_named)},
        {"epoch": 2, "measured": 4, "best": max(second), "mean": mean(second),
         **_ci(second_named)}]
    text = run_ouro("status", str(specs), env=env).stdout
    for number, named in ((1, first_named), (2, second_named)):
        values, interval = list(named.values()), _ci(named)
        assert re.search(rf"^ +{number} +4 +{max(values):g} +{mean(values):g} +"
                         rf"\[{interval['ci_low']:g}, {interval['ci_high']:g}\]$", text,
                         re.MULTILINE), text
    assert "selection: epoch 2 of 2 (truncation by probe.score.value, highest first); " \
           f"4 living members: {', '.join(living)}" in text, text
    for name in record["stopped"]:
        block = text.split(f"{name}: ")[1].split("\n  pop-")[0]
        assert "stopped (not-selected): not selected at the end of epoch 1" in block, block
    for name in living:
        assert "not-selected" not in text.split(f"{name}: ")[1].split("\n  pop-")[0]


def test_plan_and_log_show_the_stopped_members(
        population: tuple[Path, dict[str, str], dict[str, Any]]) -> None:
    specs, env, record = population
    planned = run_ouro("plan", "--json", str(specs), env=env)
    assert planned.returncode == 0, planned.stdout + planned.stderr  # nothing to do
    actions = {item["name"]: (item["action"], item["not_selected"])
               for item in json.loads(planned.stdout)["lineages"]}
    for name, (action, stop) in actions.items():
        if name in record["stopped"]:
            assert action == "done" and stop["epoch"] == 1, (name, action, stop)
        else:
            assert action == "in-sync" and stop is None, (name, action, stop)
    text = run_ouro("plan", str(specs), env=env).stdout
    assert "2 stopped (not-selected)" in text and "done (spec.until)" not in text, text
    for name in record["stopped"]:
        assert re.search(rf"= {name} +done \(not-selected\) +2/2 generations", text), text
    log = run_ouro("log", "pop", "--specs", str(specs), env=env)
    assert log.returncode == 0, log.stderr
    stopped = record["stopped"][0]
    part = log.stdout.split(f"{stopped}: ")[1]
    assert part.splitlines()[1].strip().startswith("stopped (not-selected): not selected at "
                                                    "the end of epoch 1"), part
    assert part.splitlines()[2].split()[:2] == ["gen", "epoch"], part


def test_compare_groups_by_the_epoch_a_member_was_born_into(
        population: tuple[Path, dict[str, str], dict[str, Any]]) -> None:
    specs, env, _record = population
    compared = run_ouro("compare", str(specs), "--by", "ouro/epoch", "--at", "2", "--json",
                        env=env)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    groups = {group["group"]: group["members"]
              for group in json.loads(compared.stdout)["groups"]}
    assert groups == {"ouro/epoch=1": 4, "ouro/epoch=2": 2}
