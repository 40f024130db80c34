"""A selected LineageSet runs epoch by epoch in one apply, each decision recorded before
it is acted on (issue 39, items 3-5), at the issue's numbers: 8 replicas, every: 2,
epochs: 3, truncation keep: 4. The fitness is a probe that prints a random number:
the decisions must follow the values recorded, whatever they are."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.engine.epochs import read_record
from reconciler.spec.load import default_places
from reconciler.state import probes as stored
from tests.apply.helpers import run_ouro

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

SCORE = 'printf \'{"value": %d}\' "$(od -An -N2 -tu2 /dev/urandom)"\n'
POP = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {name: pop}
spec:
  replicas: 8
  template:
    generations: 2
    model: {provider: echo}
    ceilings: {wall: 60s, cpu: 30s, memory: 512MiB}
    probes:
      - name: score
        run: [/bin/sh, /probe/score.sh]
        files: probes/score
        ceilings: {wall: 20s, cpu: 5s, memory: 256MiB}
  selection: {every: 2, epochs: 3, by: probe.score.value, method: truncation, keep: 4,
              seed: 7}
"""
BY = "probe.score.value"


def _write(specs: Path, text: str = POP) -> Path:
    (specs / "probes" / "score").mkdir(parents=True, exist_ok=True)
    (specs / "probes" / "score" / "score.sh").write_text(SCORE)
    path = specs / "pop.yaml"
    path.write_text(text)
    return path


def _plan(specs: Path, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    planned = run_ouro("plan", "--json", str(specs), env=env)
    assert planned.returncode in (0, 2), planned.stdout + planned.stderr
    document: dict[str, Any] = json.loads(planned.stdout)
    return planned.returncode, document


def _recorded_value(state: Path, name: str, generation: int) -> float:
    """The probe record's value at that generation, read from the record itself."""
    found = [r for r in stored.records(default_places(state / name, name))
             if r.generation == generation]
    assert len(found) == 1, (name, generation, found)
    return float(found[0].record["metrics"]["value"])


def _check_decision(state: Path, record: dict[str, Any], living: list[str]) -> None:
    values = record["values"]
    assert sorted(values) == sorted(living)
    for name, value in values.items():
        born = 1 if "-e" not in name else int(name.split("-e")[1].split("-")[0])
        generation = (record["epoch"] - born + 1) * 2
        assert value == _recorded_value(state, name, generation), name
    ranked = sorted(values, key=lambda name: (-values[name], name))
    assert record["kept"] == ranked[:4]
    assert sorted(record["stopped"]) == sorted(ranked[4:])
    assert [b["parent"] for b in record["born"]] == ranked[:4]  # top 4, best first


def test_eight_replicas_three_epochs_keep_four(specs: Path, env: dict[str, str],
                                               tmp_path: Path) -> None:
    _write(specs)
    code, before = _plan(specs, env)
    assert code == 2
    assert before["selection"][0]["waits_for"] == [
        f"pop-{i}: generation 2 (has 0)" for i in range(8)]
    applied = run_ouro("apply", "--yes", "--json", str(specs), env=env, timeout=900)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    # apply's report is the whole apply's, every epoch's: 3 epochs of 8 living members
    # x 2 generations, each measured; the 16 members of every epoch each once
    report = json.loads(applied.stdout)["lineages"]
    assert sum(item["generations_run"] for item in report) == 48
    assert sum(item["measured"] for item in report) == 48 + 16  # and each member's seed
    assert len({item["name"] for item in report}) == len(report) == 16
    assert {item["planned_action"] for item in report} == {"create"}
    state = tmp_path / "state"
    first = read_record(default_places(state / "pop-0", "pop-0"), "pop", 1)
    assert first is not None
    _check_decision(state, first, [f"pop-{i}" for i in range(8)])
    kept = first["kept"][0]
    second = read_record(default_places(state / kept, kept), "pop", 2)
    assert second is not None
    _check_decision(state, second, first["kept"] + [b["name"] for b in first["born"]])
    members = sorted(p.name for p in state.iterdir() if (state / f"{p.name}.git").is_dir())
    assert members == sorted([f"pop-{i}" for i in range(8)]
                             + [f"pop-e2-{i}" for i in range(4)]
                             + [f"pop-e3-{i}" for i in range(4)])  # 8 + 4 + 4
    assert len(first["stopped"]) + len(second["stopped"]) == 8
    exported = run_ouro("export", "pop", "--specs", str(specs / "pop.yaml"), "--format",
                        "csv", env=env)
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    descent = {row["lineage"]: (row["parent_lineage"], row["parent_generation"])
               for row in rows}
    for record in (first, second):
        for birth in record["born"]:
            assert descent[birth["name"]] == (birth["parent"], str(birth["generation"]))
    code, after = _plan(specs, env)
    assert code == 0, after  # in sync: every epoch run, nothing more to decide
    assert "selection" not in after
    clean = run_ouro("verify", str(specs), env=env)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "selection of set" not in clean.stdout
    _change_probe_record(state, "pop-3", 2)
    found = run_ouro("verify", str(specs), env=env)
    assert found.returncode == 1, found.stdout + found.stderr
    assert ("selection of set pop, epoch 1: pop-3's probe records of gen 2 are not the ones "
            "the decision read") in found.stdout, found.stdout


def _change_probe_record(state: Path, name: str, generation: int) -> None:
    """Rewrite one probe record after the fact: its value + 1, committed on its branch."""
    paths = default_places(state / name, name)
    repo = pygit2.Repository(str(paths.observations))
    ref = repo.references[f"refs/heads/{stored.probe_branch(paths.branch)}"]
    head = repo.get(ref.target)
    root = head.tree
    (digest,) = [entry.name for entry in root]
    folder = repo.get(root[digest].id)
    records = repo.get(folder[stored.GENERATIONS].id)
    entry = records[stored.record_name(generation)]
    record = json.loads(repo.get(entry.id).data)
    record["metrics"]["value"] += 1
    inner = repo.TreeBuilder(records)
    inner.insert(entry.name, repo.create_blob(json.dumps(record).encode()), entry.filemode)
    middle = repo.TreeBuilder(folder)
    middle.insert(stored.GENERATIONS, inner.write(), pygit2.enums.FileMode.TREE)
    top = repo.TreeBuilder(root)
    top.insert(digest, middle.write(), pygit2.enums.FileMode.TREE)
    oid = repo.create_commit(None, head.author, head.committer, "changed after the fact\n",
                             top.write(), [head.id])
    ref.set_target(oid)


def test_a_set_without_selection_plans_no_selection(specs: Path, env: dict[str, str]) -> None:
    _write(specs, POP.split("  selection:")[0])
    code, planned = _plan(specs, env)
    assert code == 2 and "selection" not in planned
    assert "selection of set" not in run_ouro("plan", str(specs), env=env).stdout
