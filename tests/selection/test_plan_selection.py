"""ouro plan shows a selected set's decision at the end of its first epoch, from the
recorded measurements, or says it waits and for what (issue 39, item 3, first epoch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.apply.helpers import run_ouro

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

SIZE = 'printf \'{"bytes": %d}\' "$(wc -c < organism.el)"\n'
POP = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {name: pop}
spec:
  replicas: 4
  template:
    generations: 2
    model: {provider: echo}
    ceilings: {wall: 60s, cpu: 30s, memory: 512MiB}
    probes:
      - name: size
        run: [/bin/sh, /probe/size.sh]
        files: probes/size
        ceilings: {wall: 20s, cpu: 5s, memory: 256MiB}
  selection: {every: 2, epochs: 3, by: probe.size.bytes, method: truncation, keep: 2,
              seed: 7}
"""


def _write(specs: Path, text: str = POP) -> None:
    (specs / "probes" / "size").mkdir(parents=True, exist_ok=True)
    (specs / "probes" / "size" / "size.sh").write_text(SIZE)
    (specs / "pop.yaml").write_text(text)


def _selection(specs: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    planned = run_ouro("plan", "--json", str(specs), env=env)
    assert planned.returncode == 2, planned.stdout + planned.stderr
    found: list[dict[str, Any]] = json.loads(planned.stdout)["selection"]
    return found


def test_plan_waits_then_decides_the_same_twice(specs: Path, env: dict[str, str]) -> None:
    _write(specs)
    before = _selection(specs, env)
    assert before[0]["waits_for"] == [f"pop-{i}: generation 2 (has 0)" for i in range(4)]
    assert before[0]["kept"] == [] and before[0]["born"] == []
    applied = run_ouro("apply", "--yes", str(specs), env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    first = _selection(specs, env)[0]
    assert first == _selection(specs, env)[0]  # run twice, it decides the same
    assert first["waits_for"] == []
    values = first["values"]
    assert sorted(values) == [f"pop-{i}" for i in range(4)]
    ranked = sorted(values, key=lambda name: (-values[name], name))
    assert first["kept"] == ranked[:2]
    assert first["stopped"] == sorted(ranked[2:])
    assert [(b["name"], b["parent"], b["generation"]) for b in first["born"]] == [
        ("pop-e2-0", ranked[0], 2), ("pop-e2-1", ranked[1], 2)]
    text = run_ouro("plan", str(specs), env=env).stdout
    assert f"fork pop-e2-0 from {ranked[0]} gen 2" in text, text


def test_a_set_without_selection_plans_no_selection(specs: Path, env: dict[str, str]) -> None:
    _write(specs, POP.split("  selection:")[0])
    planned = run_ouro("plan", "--json", str(specs), env=env)
    assert planned.returncode == 2, planned.stderr
    assert "selection" not in json.loads(planned.stdout)
    assert "selection of set" not in run_ouro("plan", str(specs), env=env).stdout
