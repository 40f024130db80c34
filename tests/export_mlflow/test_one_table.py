"""CSV, JSON lines, JSON and MLflow (a sqlite:/// store and a local folder) all hold ONE
hand-written table (issue 35): the lineages and the table of tests.history.table_fleet,
whose every expected value is written by hand from the inputs, never taken from ouro's
output."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.history.table_fleet import grow
from tests.inprocess import ouro
from tests.observe.builder import TEST_IDENTITY


@pytest.fixture
def grown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[Path, list[dict[str, Any]], list[str], str]:
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    specs = tmp_path / "specs.yaml"
    table, members, cell = grow(state, specs)
    return specs, table, members, cell


def _export(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            specs: Path, *args: str) -> str:
    code, out, err = ouro(monkeypatch, capsys, "export", "--specs", specs, "evo", "kid",
                          "grandkid", *args)
    assert code == 0, err
    return out


def _csv_text(value: Any) -> str:
    """How CSV writes a value: unknown empty, booleans True/False, the rest as str."""
    return "" if value is None else str(value)


def test_csv_jsonl_and_json_are_the_hand_written_table(
        grown: tuple[Path, list[dict[str, Any]], list[str], str],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    specs, table, _members, _cell = grown
    jsonl = _export(monkeypatch, capsys, specs, "--format", "jsonl")
    assert [json.loads(line) for line in jsonl.split("\n")[:-1]] == table
    assert len(jsonl.split("\n")) == len(table) + 1  # U+2028 and U+0085 split no line
    assert json.loads(_export(monkeypatch, capsys, specs, "--format", "json")) == table
    text = _export(monkeypatch, capsys, specs)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert list(rows[0]) == list(table[0])  # every column, in the documented order
    assert rows == [{key: _csv_text(value) for key, value in row.items()} for row in table]


def _numeric(table: list[dict[str, Any]], lineage: str) -> dict[str, list[tuple[int, float]]]:
    """The metric points MLflow should hold for a lineage: every number or boolean cell
    but the step and the design (written out: the rule of docs/export.md); row 0, the
    seed, is no step."""
    design = {"generation", "replica", "orphaned", "parent_generation",
              "matrix.ceilings.wall"}
    found: dict[str, list[tuple[int, float]]] = {}
    for row in table:
        if row["lineage"] != lineage or row["status"] == "seed":
            continue
        for key, value in row.items():
            if key in design or value is None:
                continue
            if key == "spend_usd":
                value = float(value)
            if isinstance(value, bool | int | float):
                found.setdefault(key, []).append((row["generation"], float(value)))
    return found


def _store(client: MlflowClient, experiment: str) -> tuple[list[Any], list[Any]]:
    """(group runs, lineage runs) of the experiment."""
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id], max_results=100)
    return ([run for run in runs if "ouro.group" in run.data.tags],
            [run for run in runs if "ouro.lineage" in run.data.tags])


@pytest.mark.parametrize("store", ["sqlite", "folder"])
def test_mlflow_holds_the_hand_written_table(
        grown: tuple[Path, list[dict[str, Any]], list[str], str], store: str,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    specs, table, members, cell = grown
    uri = (f"sqlite:///{tmp_path / 'mlflow.db'}" if store == "sqlite"
           else str(tmp_path / "mlruns"))  # a plain folder: no environment variable needed
    out = _export(monkeypatch, capsys, specs, "--to", "mlflow", "--tracking-uri", uri)
    assert out.count("created in experiment 'ouro', under run") == 4, out
    if store == "folder":
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # to read it back ourselves
    client = MlflowClient(tracking_uri=uri)
    groups, runs = _store(client, "ouro")
    by_group = {run.data.tags["ouro.group"]: run for run in groups}
    assert sorted(by_group) == ["file:" + hashlib.sha256(
        str(specs.absolute()).encode()).hexdigest(), "set:evo"]
    assert by_group["set:evo"].info.run_name == "evo"
    parent_of = {"set:evo": by_group["set:evo"].info.run_id}
    files = next(run for key, run in by_group.items() if key.startswith("file:"))
    assert files.data.tags["ouro.spec_file"] == str(specs.absolute())
    tags = {run.info.run_name: run.data.tags for run in runs}
    assert sorted(tags) == sorted([*members, "kid", "grandkid"])
    expected_tags = {
        members[0]: {"ouro.set": "evo", "ouro.cell": cell, "ouro.replica": "0"},
        members[1]: {"ouro.set": "evo", "ouro.cell": cell, "ouro.replica": "1"},
        "kid": {"ouro.parent_lineage": members[0], "ouro.parent_generation": "2"},
        "grandkid": {"ouro.parent_lineage": "kid", "ouro.parent_generation": "1"},
    }
    design = ("ouro.set", "ouro.cell", "ouro.replica", "ouro.parent_lineage",
              "ouro.parent_generation")
    for name, wanted in expected_tags.items():
        assert {key: tags[name][key] for key in design if key in tags[name]} == wanted
        assert tags[name]["ouro.kernel"] == "f" * 64  # the birth metadata's (TEST_IDENTITY)
        parent = parent_of["set:evo"] if name in members else files.info.run_id
        assert tags[name]["mlflow.parentRunId"] == parent, name
    for run in runs:
        history = {key: sorted((m.step, m.value) for m in
                               client.get_metric_history(run.info.run_id, key))
                   for key in run.data.metrics}
        assert history == _numeric(table, run.info.run_name), run.info.run_name
    again = _export(monkeypatch, capsys, specs, "--to", "mlflow", "--tracking-uri", uri)
    assert again.count("found in experiment 'ouro'") == 4 and "0 metric points" in again
    assert again.count("nothing new") == 4, again
    groups_again, runs_again = _store(client, "ouro")
    assert len(groups_again) == 2 and len(runs_again) == 4  # nothing made twice


def test_identity_is_the_builders() -> None:
    """The kernel tag expected above is the builder's identity (a guard for this file)."""
    assert TEST_IDENTITY.fingerprint == "f" * 64


def test_the_viewer_draws_the_hand_written_table(
        grown: tuple[Path, list[dict[str, Any]], list[str], str]) -> None:
    """The viewer's plots render the same table: each lineage's rows as the viewer reads
    them are the hand-written table's, and a plot's series is that table's column."""
    from reconciler.viewer import plots
    from reconciler.viewer.server import make_source

    specs, table, members, _cell = grown
    source = make_source([specs], None)
    columns = list(table[0])
    for name, shown in source.lineages().items():
        rows = source.known(name, shown).table.rows
        assert [row.as_dict(columns) for row in rows] == [
            row for row in table if row["lineage"] == name], name
        size = [plots.PLOTS["size"].series[0][1](row) for row in plots.lived(rows)]
        assert size == [None if row["organism_bytes"] is None else row["organism_bytes"] / 1024
                        for row in table if row["lineage"] == name and row["generation"]]
    assert sorted(source.lineages()) == sorted([*members, "kid", "grandkid"])
