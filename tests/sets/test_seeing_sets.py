"""A set seen whole: `ouro status`, `log` and `export` group its members by set and cell
and show the members it no longer has as orphaned, the same ones plan names (real
lineages in docs/lineage-contract.md's formats, written with pygit2; nothing is deleted)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from reconciler.spec.load import load_specs
from reconciler.spec.sets import orphan_membership
from tests.inprocess import ouro
from tests.observe.builder import LineageBuilder

SET = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {{name: sweep, labels: {{team: evo}}}}
spec:
  replicas: {replicas}
  matrix:
    model: {models}
    ceilings.wall: [60s]
  template: {{generations: 2}}
---
apiVersion: ouro/v1
kind: Lineage
metadata: {{name: alone}}
spec: {{generations: 1, model: {{provider: echo}}}}
"""
TWO = "[{provider: echo}, {provider: echo, name: other}]"
CALL = {"http_status": 200, "usage": {"input_tokens": 10, "output_tokens": 4},
        "accounted_usd": "0.01", "reserved_usd": "0.05"}


@pytest.fixture
def grown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """A set of 2 cells x 2 replicas and a plain lineage, grown; then the spec lowered to
    1 replica of the second cell: three members become orphans. Returns the spec and the
    members' names as status shows them: the kept cell's (kept, orphan), then the removed
    cell's (written first, but its cell is no longer the set's: last)."""
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    spec = tmp_path / "set.yaml"
    spec.write_text(SET.format(replicas=2, models=TWO))
    names = []
    for loaded in load_specs([spec], state_dir=state):
        builder = LineageBuilder(state, loaded.name)
        builder.gen("changed", calls=[CALL])
        if loaded.set_name is not None:
            builder.gen("died")
            names.append(loaded.name)
    spec.write_text(SET.format(replicas=1, models="[{provider: echo, name: other}]"))
    return spec, [names[2], names[3], names[0], names[1]]


def test_status_groups_a_set_by_cell_and_marks_orphans_as_plan_does(
        grown: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec, names = grown
    kept, orphans = names[0], names[1:]
    _, out, _ = ouro(monkeypatch, capsys, "plan", "--json", spec)
    assert [item["name"] for item in json.loads(out)["orphaned"]] == sorted(orphans)
    code, out, err = ouro(monkeypatch, capsys, "status", spec)
    assert code == 0, err
    lines = out.splitlines()
    first_cell, second_cell = (name.removeprefix("sweep-").rsplit("-", 1)[0]
                               for name in (names[0], names[2]))
    heads = [line for line in lines if line.lstrip().startswith(
        ("set ", "cell ", "sweep-", "lineages ", "alone:"))]
    assert heads == [
        "set sweep: 1 member in 1 cell, 3 orphaned",
        f'  cell {first_cell} (model={{"name":"other","provider":"echo"}}, '
        "ceilings.wall=60s):",
        f"    {kept}: 2 generations (1 changed, 0 no-change, 1 died)",
        f"    {names[1]}: 2 generations (1 changed, 0 no-change, 1 died)",
        f"  cell {second_cell} (no longer in the set):",
        f"    {names[2]}: 2 generations (1 changed, 0 no-change, 1 died)",
        f"    {names[3]}: 2 generations (1 changed, 0 no-change, 1 died)",
        "lineages not in a set:",
        "alone: 1 generation (1 changed, 0 no-change, 0 died)",
    ]
    marked = [lines[i - 1].strip().split(":")[0] for i, line in enumerate(lines)
              if "orphaned: no longer in set sweep; kept (nothing is deleted)" in line]
    assert marked == orphans  # the removed cell's last, though the spec wrote it first
    code, out, _ = ouro(monkeypatch, capsys, "status", "--json", "-l", "ouro/set=sweep", spec)
    found = {item["name"]: item["set"] for item in json.loads(out)["lineages"]}
    assert list(found) == names  # a selection of the set brings its orphans, as plan's does
    assert found[kept] == {"name": "sweep", "cell": first_cell, "replica": 0,
                           "matrix": {"model": {"provider": "echo", "name": "other"},
                                      "ceilings.wall": "60s"},
                           "orphaned": False}
    assert found[names[1]]["orphaned"] and found[names[1]]["matrix"] == found[kept]["matrix"]
    assert found[names[3]] == {"name": "sweep", "cell": second_cell, "replica": 1,
                               "matrix": {}, "orphaned": True}
    _, out, _ = ouro(monkeypatch, capsys, "status", "--json", "-l", "alone", spec)
    assert [item["set"] for item in json.loads(out)["lineages"]] == [None]


def test_log_takes_a_set_by_name(grown: tuple[Path, list[str]],
                                 monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    spec, names = grown
    code, out, err = ouro(monkeypatch, capsys, "log", "--specs", spec, "sweep", "alone")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "set sweep: 1 member in 1 cell, 3 orphaned"
    assert lines[2].startswith(f"    {names[0]}: 2 generations, 1 died")
    assert lines[3].split() == ["gen", "outcome", "organism", "diff", "calls", "spend", "$",
                                "cpu", "s", "peak", "mem", "wall", "s"]
    assert lines[3].startswith("      gen")
    assert [line.split(":")[0].strip() for line in lines
            if line.startswith("    sweep-")] == names
    assert out.count("orphaned: no longer in set sweep") == 3
    assert "lineages not in a set:\nalone: 1 generation" in out
    code, out, _ = ouro(monkeypatch, capsys, "log", "--json", "--specs", spec, "sweep")
    found = json.loads(out)["lineages"]
    assert [item["name"] for item in found] == names
    assert [item["set"]["orphaned"] for item in found] == [False, True, True, True]
    assert [len(item["rows"]) for item in found] == [3, 3, 3, 3]  # row 0, the seed, first
    code, out, err = ouro(monkeypatch, capsys, "log", "sweep")  # no spec: says what to do
    assert code == 1 and "'sweep' looks like a set (4 lineages are named as its" in err
    assert "name its spec with --specs FILE" in err


def test_export_carries_set_and_matrix_columns(grown: tuple[Path, list[str]],
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    spec, names = grown
    code, out, err = ouro(monkeypatch, capsys, "export", "--specs", spec, "sweep", "alone")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    header = out.splitlines()[0].split(",")
    assert header[-2:] == ["matrix.model", "matrix.ceilings.wall"]
    design = ["set", "cell", "replica", "orphaned", "epoch", "parent_lineage",
              "parent_generation"]  # epoch: empty, a set without selection
    assert header[header.index("usage_exceeds_request") + 1:][:7] == design
    assert [row["lineage"] for row in rows] == [  # rows 0, 1, 2: the seed first
        name for name in names for _ in (0, 1, 2)] + ["alone"] * 2
    first = rows[0]
    assert (first["set"], first["replica"], first["orphaned"], first["matrix.model"],
            first["matrix.ceilings.wall"]) == ("sweep", "0", "False",
                                               '{"name":"other","provider":"echo"}', "60s")
    assert [row["orphaned"] for row in rows[::3]] == ["False", "True", "True", "True", ""]
    assert rows[-3]["matrix.model"] == "" and rows[-3]["replica"] == "1"  # a lost value
    assert all(rows[-1][column] == "" for column in [*design, *header[-2:]])  # not in a set
    assert rows[-1]["absolute_generation"] == rows[-1]["generation"] == "1"  # no fork
    assert rows[-2]["absolute_generation"] == rows[-2]["generation"] == "0"  # its seed
    code, out, _ = ouro(monkeypatch, capsys, "export", "--format", "jsonl", "--specs", spec,
                        "sweep")
    first_line = json.loads(out.splitlines()[0])
    assert first_line["matrix.model"] == {"provider": "echo", "name": "other"}
    assert first_line["replica"] == 0 and first_line["orphaned"] is False
    code, out, _ = ouro(monkeypatch, capsys, "export", "alone")  # no set: no matrix columns
    assert out.splitlines()[0].split(",")[-1] == "absolute_generation"


def test_an_orphan_name_gives_its_cell_and_replica() -> None:
    known = {"echo-410cbe": {"model": "echo"}}
    found = orphan_membership("grow", "grow-echo-410cbe-12", known)
    assert (found.cell, found.replica, found.matrix, found.orphaned) == (
        "echo-410cbe", 12, {"model": "echo"}, True)
    gone = orphan_membership("grow", "grow-up-ab12cd-3", known)
    assert (gone.cell, gone.replica, gone.matrix) == ("up-ab12cd", 3, {})
    plain = orphan_membership("grow", "grow-7", {None: {}})
    assert (plain.cell, plain.replica) == (None, 7)
