"""Tournament end to end (issue 39): the same set run twice records identical
decisions; another seed records another one, and each verifies clean. MAP-Elites the
same, over a matrix of replay folders whose bodies measure apart (one bin per cell):
each bin's best kept, the parents of the born drawn by the seed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine.epochs import read_record
from reconciler.spec.load import default_places
from tests.apply.helpers import run_ouro, write_replies
from tests.selection.test_population import POP, _write

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

SIZE = 'printf \'{"value": %d}\' "$(wc -c < organism.el)"\n'  # the same for every member
METHODS = {"tournament": "method: tournament, tournament: {size: 2}"}


def _run(root: Path, method: str, seed: int) -> dict[str, Any]:
    specs = root / "specs"
    specs.mkdir(parents=True)
    text = POP.replace("replicas: 8", "replicas: 6").replace("epochs: 3", "epochs: 2") \
        .replace("method: truncation, keep: 4", METHODS[method]).replace("seed: 7",
                                                                          f"seed: {seed}")
    _write(specs, text)
    (specs / "probes" / "score" / "score.sh").write_text(SIZE)
    env = {**os.environ, "OURO_STATE_DIR": str(root / "state")}
    applied = run_ouro("apply", "--yes", str(specs), env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert run_ouro("verify", str(specs), env=env).returncode == 0
    record = read_record(default_places(root / "state" / "pop-0", "pop-0"), "pop", 1)
    assert record is not None
    return {key: record[key] for key in ("kept", "stopped", "born")}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_same_seed_decides_the_same_another_seed_otherwise(
        tmp_path: Path, method: str) -> None:
    first = _run(tmp_path / "a", method, 7)
    again = _run(tmp_path / "b", method, 7)
    assert first == again
    others = [_run(tmp_path / f"s{seed}", method, seed) for seed in (1, 2)]
    assert any(other != first for other in others), (first, others)


# MAP-Elites needs members that measure apart: a matrix of three replay folders, each
# answering gen 1 with a body of its own size (comments only: no later life asks again)
BODIES = {"a": 200, "b": 400, "c": 800}  # bytes; the bins' edges fall between them
ELITES = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {name: pop}
spec:
  replicas: 2
  matrix:
    model:
      - {provider: replay, replay: replies/a}
      - {provider: replay, replay: replies/b}
      - {provider: replay, replay: replies/c}
  template:
    generations: 2
    model: {provider: echo}
    ceilings: {wall: 60s, cpu: 30s, memory: 512MiB}
    probes:
      - name: score
        run: [/bin/sh, /probe/score.sh]
        files: probes/score
        ceilings: {wall: 20s, cpu: 5s, memory: 256MiB}
  selection: {every: 2, epochs: 2, by: probe.score.value, method: map-elites,
              map-elites: {descriptors: [{by: probe.score.value, bins: [300, 600]}]},
              seed: SEED}
"""


def _elites(root: Path, seed: int) -> dict[str, Any]:
    specs = root / "specs"
    specs.mkdir(parents=True)
    _write(specs, ELITES.replace("SEED", str(seed)))
    (specs / "probes" / "score" / "score.sh").write_text(SIZE)
    for cell, size in BODIES.items():
        body = f";; cell {cell}\n"
        write_replies(specs / "replies" / cell, [body + ";" * (size - len(body) - 1) + "\n"] * 8)
    env = {**os.environ, "OURO_STATE_DIR": str(root / "state")}
    applied = run_ouro("apply", "--yes", str(specs), env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert run_ouro("verify", str(specs), env=env).returncode == 0
    state = root / "state"
    found = [read_record(default_places(state / p.stem, p.stem), "pop", 1)
             for p in sorted(state.glob("pop-*.git"))]
    records = [record for record in found if record is not None]
    assert len(records) == 6 and all(r == records[0] for r in records)  # every candidate's
    return records[0]


def test_map_elites_keeps_each_bins_best_and_its_draws_follow_the_seed(
        tmp_path: Path) -> None:
    first = _elites(tmp_path / "a", 7)
    by_size = {size: sorted(name for name, value in first["values"].items() if value == size)
               for size in BODIES.values()}
    assert sorted(len(names) for names in by_size.values()) == [2, 2, 2]  # one bin per cell
    assert sorted(first["kept"]) == sorted(names[0] for names in by_size.values())
    assert sorted(first["stopped"]) == sorted(names[1] for names in by_size.values())
    assert len(first["born"]) == 3 and {b["parent"] for b in first["born"]} <= set(first["kept"])
    decision = {key: first[key] for key in ("kept", "stopped", "born")}
    again = _elites(tmp_path / "b", 7)
    assert {key: again[key] for key in ("kept", "stopped", "born")} == decision
    other = _elites(tmp_path / "s1", 1)
    assert other["kept"] == first["kept"]  # the elites are no draw
    assert other["born"] != first["born"]  # the parents are: another seed, other draws
