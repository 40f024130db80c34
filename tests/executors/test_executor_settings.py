"""spec.executor.slurm: its fields, their errors (file:line:col), and the job parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.engine.executors import check_options, make_executor
from reconciler.engine.executors.request import LineageRequest
from reconciler.engine.executors.slurm import SIGNAL_SECONDS, slurm_parameters
from reconciler.errors import ApplyError, SpecError
from reconciler.spec.load import load_specs

HEAD = """apiVersion: ouro/v1
kind: Lineage
metadata: {name: job}
spec:
  generations: 2
  model: {provider: echo}
  ceilings: {wall: 60s, cpu: 30s}
  executor:
    slurm:
"""


def _spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD + "".join(f"      {line}\n" for line in body.splitlines()))
    return path


def test_settings_become_submitit_parameters(tmp_path: Path) -> None:
    path = _spec(tmp_path, "partition: gpu-a\naccount: lab_1\ntime: 1h30m\ncpus: 2\n"
                 "memory: 3GiB\nsbatch: [--qos=low, --exclusive, '--constraint=a&b']")
    spec = load_specs([path], state_dir=tmp_path)[0]
    assert slurm_parameters(spec) == {
        "slurm_time": 90,
        "slurm_job_name": "ouro-job",
        "slurm_cpus_per_task": 2,
        "slurm_signal_delay_s": SIGNAL_SECONDS,
        "slurm_partition": "gpu-a",
        "slurm_account": "lab_1",
        "slurm_mem": "3072M",
        "slurm_additional_parameters": {"qos": "low", "exclusive": True, "constraint": "a&b"},
    }


def test_defaults_leave_the_cluster_its_own(tmp_path: Path) -> None:
    spec = load_specs([_spec(tmp_path, "{}")], state_dir=tmp_path)[0]
    parameters = slurm_parameters(spec)
    assert parameters["slurm_time"] == 60 and parameters["slurm_cpus_per_task"] == 1
    assert "slurm_partition" not in parameters and "slurm_mem" not in parameters


@pytest.mark.parametrize(
    ("body", "where", "words"),
    [
        ("sbatch: [--qos=low, --time=5]", ":10:27: spec.executor.slurm.sbatch.1",
         "--time is set by ouro itself"),
        ("sbatch: [qos=low]", ":10:16: spec.executor.slurm.sbatch.0", "is not an sbatch option"),
        ('sbatch: ["--qos=a\\nb"]', ":10:16: spec.executor.slurm.sbatch.0",
         "is not an sbatch option"),
        ("cpus: 0", ":10:13: spec.executor.slurm.cpus", "at least 1"),
        ("time: 30s", ":10:13: spec.executor.slurm.time", "at least 60"),
        ("partition: 'a b'", ":10:18: spec.executor.slurm.partition",
         "not a Slurm partition or account name"),
        ("partiton: x", ":10:7: spec.executor.slurm.partiton", "did you mean 'partition'"),
    ],
    ids=["ouro-owned", "not-an-option", "newline", "cpus", "time", "partition", "typo"],
)
def test_bad_settings_name_their_place(tmp_path: Path, body: str, where: str,
                                       words: str) -> None:
    path = _spec(tmp_path, body)
    with pytest.raises(SpecError) as caught:
        load_specs([path], state_dir=tmp_path)
    message = str(caught.value)
    assert f"{path}{where}" in message, message
    assert words in message, message


def test_a_time_limit_shorter_than_one_generation_is_refused(tmp_path: Path) -> None:
    spec = load_specs([_spec(tmp_path, "time: 2m")], state_dir=tmp_path)[0]
    with pytest.raises(ApplyError) as caught:
        slurm_parameters(spec)
    assert f"{spec.where}: spec.executor.slurm.time 120s is too short" in str(caught.value)


def test_unknown_executors_and_local_only_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ApplyError, match="no such executor"):
        check_options("k8s", deadline=None, max_generations=None)
    with pytest.raises(ApplyError, match="--deadline and --max-generations"):
        check_options("slurm", deadline=60.0, max_generations=None)
    check_options("local", deadline=60.0, max_generations=3)
    with pytest.raises(ApplyError, match="no such executor"):
        make_executor("nomad", engine=None, state_dir=tmp_path)  # type: ignore[arg-type]


def test_a_request_round_trips_and_a_foreign_one_is_refused() -> None:
    request = LineageRequest(name="a", spec_file="/s/a.yaml", spec_sha256="0" * 64,
                             state_dir="/state", identity={"commit": "c"}, lock_timeout=5.0,
                             time_limit_seconds=600, signal_seconds=90)
    assert LineageRequest.from_json(request.to_json()) == request
    assert request.deadline_seconds(60) == 600 - 90 - 30 - 60
    with pytest.raises(ApplyError, match="not an ouro-lineage-request/v1"):
        LineageRequest.from_json('{"name": "a"}')
    with pytest.raises(ApplyError, match="malformed"):
        LineageRequest.from_json('{"format": "ouro-lineage-request/v1", "name": "a"}')
