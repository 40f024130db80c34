"""Names and selectors on every reading command, with or without specs (issue 41, 5):
`ouro status probed` takes a name as log/show/diff do, `ouro status -l ouro/set=evo`
without a path selects the set's members in the state dir, and log, export and verify
resolve their arguments the same way (one home: ``reconciler.engine.chosen``). Real
lineages in docs/lineage-contract.md's formats, written with pygit2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.spec.load import load_specs
from tests.inprocess import ouro
from tests.observe.builder import LineageBuilder

ROOT = Path(__file__).resolve().parents[2]
SPECS = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {name: evo, labels: {team: evo}}
spec:
  replicas: 2
  template: {generations: 1, model: {provider: echo}}
---
apiVersion: ouro/v1
kind: Lineage
metadata: {name: probed-bad, labels: {team: ops}}
spec: {generations: 1, model: {provider: echo}}
"""
MEMBERS = ["evo-0", "evo-1"]


@pytest.fixture
def grown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two members of set evo and a plain lineage, one generation each; returns the spec."""
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    spec = tmp_path / "specs.yaml"
    spec.write_text(SPECS)
    for loaded in load_specs([spec], state_dir=state):
        LineageBuilder(state, loaded.name).gen("changed")
    return spec


def _names(out: str) -> list[str]:
    return [item["name"] for item in json.loads(out)["lineages"]]


def test_status_takes_a_name_and_a_selector_without_specs(
        grown: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = ouro(monkeypatch, capsys, "status", "--json", "probed-bad")
    assert code == 0, err
    assert _names(out) == ["probed-bad"]
    code, out, err = ouro(monkeypatch, capsys, "status", "--json", "-l", "ouro/set=evo")
    assert code == 0, err
    assert _names(out) == MEMBERS
    code, out, err = ouro(monkeypatch, capsys, "status", "--json", "-l", "ouro/set!=evo")
    assert (code, _names(out)) == (0, ["probed-bad"]), err
    code, out, err = ouro(monkeypatch, capsys, "status", "-l", "ouro/replica=1,ouro/set=evo")
    assert code == 0 and "evo-1:" in out and "evo-0:" not in out, err
    # with the specs, the specs' labels; a name and a path together
    code, out, err = ouro(monkeypatch, capsys, "status", "--json", "-l", "team=ops", grown)
    assert (code, _names(out)) == (0, ["probed-bad"]), err
    code, out, err = ouro(monkeypatch, capsys, "status", "--json", grown, "evo")
    assert (code, _names(out)) == (0, MEMBERS), err


def test_a_label_only_specs_carry_is_refused_without_them_saying_so(
        grown: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = ouro(monkeypatch, capsys, "status", "-l", "team=ops")
    assert code == 1
    assert "ouro status: --select team=ops: selects no lineage of the state dir" in err
    assert "name the specs" in err
    code, _, err = ouro(monkeypatch, capsys, "status", "no-such")
    assert code == 1 and "no lineage 'no-such'" in err, err


def test_log_export_and_verify_take_names_and_selectors(
        grown: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = ouro(monkeypatch, capsys, "log", "--json", "-l", "ouro/set=evo")
    assert code == 0, err
    assert _names(out) == MEMBERS
    code, out, err = ouro(monkeypatch, capsys, "export", "--format", "jsonl",
                          "-l", "ouro/set=evo")
    assert code == 0, err
    assert sorted({json.loads(line)["lineage"] for line in out.splitlines()}) == MEMBERS
    code, out, err = ouro(monkeypatch, capsys, "export", "--format", "jsonl", "--specs",
                          grown, "-l", "team=ops")
    assert code == 0, err
    assert {json.loads(line)["lineage"] for line in out.splitlines()} == {"probed-bad"}
    # verify audits the lineage named (the builder's seed is not the kernel's: a finding)
    code, out, err = ouro(monkeypatch, capsys, "verify", "--json", "probed-bad")
    assert code in (0, 1) and not err, err
    assert [item["lineage"] for item in json.loads(out)["lineages"]] == ["probed-bad"]
    code, out, err = ouro(monkeypatch, capsys, "verify", "--json", "-l", "ouro/set=evo")
    assert [item["lineage"] for item in json.loads(out)["lineages"]] == MEMBERS, err


def test_a_name_shadowed_by_its_own_worktree_is_a_name(grown: Path) -> None:
    """Run from the state dir, `probed-bad` is also the lineage's worktree folder: a folder
    with no spec, while the state dir has that lineage, is the lineage's name."""
    state = Path(os.environ["OURO_STATE_DIR"])
    assert (state / "probed-bad").is_dir()
    done = subprocess.run([sys.executable, "-c", "import sys; from reconciler.cli import main;"
                           " sys.argv[0] = 'ouro'; main()", "status", "probed-bad"],
                          cwd=state, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("probed-bad:"), done.stdout
