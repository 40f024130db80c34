"""`ouro export --to mlflow` against a real local MLflow tracking store (a folder),
read back through MLflow's own client: lineages grown by a real `ouro apply`. The table
held to hand-written values in every format and both local stores:
tests/export_mlflow/test_one_table.py."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.tracking import MlflowClient

from reconciler.engine.mlflow_export import LineageRun, export_runs, metric_points
from reconciler.errors import OuroError
from reconciler.spec.load import load_specs
from reconciler.state.summaries import GenerationRow
from reconciler.state.table import TableRow
from tests.apply.helpers import REPO_ROOT, run_ouro, write_spec
from tests.inprocess import ouro

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

# Columns of the table that are numbers (booleans count as 1/0, spend_usd is decimal text).
NUMERIC = ("exit_status", "organism_bytes", "organism_added", "organism_deleted",
           "paths_changed", "model_calls", "tokens_in", "tokens_out", "spend_usd",
           "cpu_seconds", "memory_peak_bytes", "wall_seconds", "external_edits_before",
           "observed", "truncated_calls", "stops_lineage", "usage_exceeds_request",
           "absolute_generation")


PROBE = """  probes:
    - name: definitions
      run: [emacs, -Q, --batch, -l, /probe/definitions.el]
      files: probes/definitions
      ceilings: {wall: 60s, cpu: 30s, memory: 512MiB}
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["OURO_STATE_DIR"] = str(tmp_path / "state")
    env.pop("MLFLOW_ALLOW_FILE_STORE", None)  # ouro opens a named folder without it
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _ok(env: dict[str, str], *args: str) -> str:
    result = run_ouro(*args, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _table(env: dict[str, str], name: str) -> list[dict[str, object]]:
    """The export's generations (row 0, the seed, is no MLflow step: --to mlflow logs
    generations 1..N)."""
    return [row for line in _ok(env, "export", name, "--format", "jsonl").splitlines()
            if (row := json.loads(line))["generation"] != 0]


def _expected(rows: list[dict[str, object]]) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for column in (*NUMERIC, *(c for c in row if c.startswith("probe."))):
            value = row[column]
            if isinstance(value, bool | int | float | str):  # None: unknown, not a point
                found.setdefault(column, []).append((int(str(row["generation"])), float(value)))
    return found


def _spec(folder: Path, generations: int) -> Path:
    """An echo lineage with the default fleet's probe (probe.definitions.* columns)."""
    if not (folder / "probes").exists():
        shutil.copytree(REPO_ROOT / "specs" / "probes", folder / "probes")
    spec = write_spec(folder, "alpha", generations)
    spec.write_text(spec.read_text() + PROBE)
    return spec


def _run(client: MlflowClient, experiment: str, name: str) -> Run:
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id], filter_string=f"tags.`ouro.lineage` "
                              f"LIKE '{name}@%'")
    assert len(runs) == 1, runs
    return runs[0]


def _history(client: MlflowClient, run: Run) -> dict[str, list[tuple[int, float]]]:
    return {key: sorted((m.step, m.value) for m in
                        client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics}


@pytest.mark.slow  # two applies with a probe: 14 s alone, more on a loaded host
def test_round_trip_then_only_new_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    env = _env(tmp_path)
    uri = (tmp_path / "mlruns").as_uri()
    specs = tmp_path / "specs"
    specs.mkdir()
    spec = _spec(specs, 3)
    _ok(env, "apply", "--yes", str(spec))
    text = _ok(env, "export", "alpha", "--to", "mlflow", "--tracking-uri", uri,
               "--experiment", "growth", "--specs", str(spec))
    assert "created in experiment 'growth'" in text and "generations 1-3" in text
    client = MlflowClient(tracking_uri=uri)
    run = _run(client, "growth", "alpha")
    rows = _table(env, "alpha")
    assert _history(client, run) == _expected(rows)
    assert [step for step, _ in _history(client, run)["probe.definitions.forms"]] == [1, 2, 3]
    [loaded] = load_specs([spec], state_dir=tmp_path / "state")
    assert run.data.params["metadata.name"] == "alpha"
    assert run.data.params["spec.generations"] == "3"
    assert run.data.params["spec.model.provider"] == "echo"
    assert run.data.params["spec.ceilings.memory"] == str(loaded.spec.spec.ceilings.memory)
    tags = run.data.tags
    assert tags["ouro.spec_digest"] == loaded.sha256
    assert tags["ouro.kernel_commit"] == rows[-1]["kernel_commit"]
    assert tags["ouro.kernel_fingerprint"] == rows[-1]["kernel_fingerprint"]
    assert len(str(tags["ouro.kernel_fingerprint"])) == 64
    assert tags["mlflow.runName"] == "alpha"
    # More generations, then export again: the same run, only generations 4-5 added.
    _spec(specs, 5)
    _ok(env, "apply", "--yes", str(spec))
    text = _ok(env, "export", "alpha", "--to", "mlflow", "--tracking-uri", uri,
               "--experiment", "growth", "--specs", str(spec))
    again = _run(client, "growth", "alpha")
    assert again.info.run_id == run.info.run_id
    history = _history(client, again)
    assert all([step for step, _ in points] == [1, 2, 3, 4, 5]  # each step exactly once
               for key, points in history.items() if key != "exit_status")
    assert history == _expected(_table(env, "alpha"))
    assert "found in experiment 'growth'" in text and "generations 4-5" in text
    assert "param spec.generations differs" in run_ouro(
        "export", "alpha", "--to", "mlflow", "--tracking-uri", uri, "--experiment", "growth",
        "--specs", str(spec), env=env).stderr
    assert again.data.params["spec.generations"] == "3"  # MLflow keeps a logged param
    assert "nothing new" in _ok(env, "export", "alpha", "--to", "mlflow",
                                "--tracking-uri", uri, "--experiment", "growth")
    assert _history(client, _run(client, "growth", "alpha")) == history


def test_without_a_spec_params_are_the_birth_metadata(tmp_path: Path) -> None:
    env = _env(tmp_path)
    uri = (tmp_path / "mlruns").as_uri()
    spec = write_spec(tmp_path, "beta", 1)
    _ok(env, "apply", "--yes", str(spec))
    _ok(env, "export", "beta", "--to", "mlflow", "--tracking-uri", uri)
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        run = _run(MlflowClient(tracking_uri=uri), "ouro", "beta")
    finally:
        del os.environ["MLFLOW_ALLOW_FILE_STORE"]
    row = _table(env, "beta")[0]
    assert run.data.params["lineage.instrument_commit"] == row["kernel_commit"]
    assert run.data.params["lineage.schema"] == "ouroboros-lineage/v2"
    assert "ouro.spec_digest" not in run.data.tags
    assert run.data.tags["ouro.lineage"].startswith("beta@")
    assert len(run.data.tags["ouro.root_commit"]) == 40


def test_an_unknown_lineage_exits_1(tmp_path: Path) -> None:
    env = _env(tmp_path)
    result = run_ouro("export", "nosuch", "--to", "mlflow", "--tracking-uri",
                      (tmp_path / "mlruns").as_uri(), env=env)
    assert result.returncode == 1
    assert "no lineage 'nosuch'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "mlruns").exists()


def test_a_missing_extra_names_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    code, _out, err = ouro(monkeypatch, capsys, "export", "any", "--to", "mlflow")
    assert code == 1
    assert "pip install -c constraints.txt -e '.[mlflow]'" in err
    assert "pip install 'ouro-lineages[mlflow]'" in err


def _facts(generation: int, **more: object) -> GenerationRow:
    """A generation's facts, unknown but for what is given."""
    fields: dict[str, object] = dict.fromkeys(
        ("status", "outcome", "death_cause", "exit_status", "model_failure", "organism_bytes",
         "organism_added", "organism_deleted", "paths_changed", "model_calls", "tokens_in",
         "tokens_out", "spend_usd", "cpu_seconds", "memory_peak_bytes", "wall_seconds",
         "started_at", "provider", "model"))
    fields.update({"generation": generation, "external_edits_before": 0,
                   "lineage_commit": "0" * 40, "observed": True, **more})
    return GenerationRow(**fields)  # type: ignore[arg-type]


def test_probe_columns_and_batches_beyond_mlflows_limits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any numeric column of the table is a metric (probe columns too); 1,500 generations
    of 2 metrics go in batches MLflow accepts, and a second export adds nothing."""
    rows = [TableRow("many", _facts(n, spend_usd="0.5", wall_seconds=float("nan"),
                                    model="echo"),
                     probes={"probe.defs.count": n * 2, "probe.loads.ok": n % 2 == 0,
                             "probe.loads.note": "a\u2028b"})
             for n in range(1, 1501)]
    columns = ("generation", "spend_usd", "wall_seconds", "model", "probe.defs.count",
               "probe.loads.ok", "probe.loads.note")
    points = metric_points(rows, columns)
    assert sorted(points) == ["probe.defs.count", "probe.loads.ok", "spend_usd"]
    uri = (tmp_path / "mlruns").as_uri()
    batches: list[tuple[int, int]] = []
    real = MlflowClient.log_batch

    def counted(self: MlflowClient, run_id: str, metrics: Sequence[Metric] = (),
                params: Sequence[Param] = (), tags: Sequence[RunTag] = ()) -> None:
        batches.append((len(metrics), len(params) + len(tags)))
        real(self, run_id, metrics=metrics, params=params, tags=tags)

    monkeypatch.setattr(MlflowClient, "log_batch", counted)
    run = LineageRun("many", "0" * 40, rows, columns, {f"p{i}": str(i) for i in range(150)},
                     {})
    [done] = export_runs([run], uri, "big")
    assert done.created and done.points_added == 4500 and done.steps_added[-1] == 1500
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # to read the folder ourselves
    client = MlflowClient(tracking_uri=uri)
    history = client.get_metric_history(done.run_id, "probe.defs.count")
    assert sorted((m.step, m.value) for m in history) == [(n, n * 2.0) for n in range(1, 1501)]
    assert len(client.get_run(done.run_id).data.params) == 150
    [again] = export_runs([run], uri, "big")
    assert again.run_id == done.run_id and again.points_added == 0
    # MLflow's limits per log_batch: 1,000 metrics, 100 params and tags together
    assert max(metrics for metrics, _ in batches) == 1000
    assert max(others for _, others in batches) == 100
    assert sum(metrics for metrics, _ in batches) == 4500


@pytest.mark.parametrize(("args", "said"), [
    (("--to", "xlsx"), "'xlsx' is not one of mlflow"),
    (("--tracking-uri", "file:///nowhere"), "goes with --to mlflow"),
    (("--experiment", "other"), "goes with --to mlflow"),
    (("--to", "mlflow", "-o", "table.csv"), "--to mlflow writes none"),
], ids=["unknown-destination", "uri-alone", "experiment-alone", "file-and-mlflow"])
def test_destination_usage_errors_exit_2(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str],
                                         args: tuple[str, ...], said: str) -> None:
    code, _out, err = ouro(monkeypatch, capsys, "export", "any", *args)
    assert code == 2 and said in " ".join(err.split()), err


def test_a_store_that_refuses_is_a_clear_error() -> None:
    """A URI MLflow's client takes for no store: the error names the URI and the kinds."""
    uri = "nosuch://somewhere"
    with pytest.raises(OuroError) as raised:
        export_runs([LineageRun("one", "0" * 40, [TableRow("one", _facts(1, model_calls=1))],
                                ("generation", "model_calls"), {}, {})], uri, "ouro")
    assert f"the MLflow tracking store at {uri} refused" in str(raised.value)
    assert "sqlite:///FILE" in str(raised.value)
