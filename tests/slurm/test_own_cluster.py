"""The suite's cluster leaves any other on the machine alone, and says why it cannot start.

A second cluster brought up beside the suite's (as a machine's own single-node cluster
would be) keeps its job while the suite's cluster runs an apply, neither lists the
other's jobs, and stopping it leaves the suite's cluster up.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.apply.helpers import assert_invariant, run_ouro, write_spec
from tests.observe.builder import lineage_paths
from tests.slurm.cluster import Cluster, start_cluster, unavailable

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slurm, pytest.mark.slow]


def _jobs(cluster: Cluster) -> list[str]:
    listing = cluster.command("squeue", "-h", "-o", "%i %j")
    assert listing.returncode == 0, listing.stderr
    return listing.stdout.split("\n")[:-1]


def test_another_cluster_on_the_machine_is_neither_used_nor_disturbed(
    _on_the_suites_cluster: Cluster, specs: Path, env: dict[str, str], tmp_path: Path
) -> None:
    ours = _on_the_suites_cluster
    other = start_cluster()
    try:
        assert other.conf != ours.conf and other.munge_socket != ours.munge_socket
        held = other.command("sbatch", "--parsable", "--job-name=theirs", "--wrap",
                             "sleep 300", "-o", "/dev/null")
        assert held.returncode == 0, held.stderr
        theirs = held.stdout.strip()
        write_spec(specs, "sl-beside", 1).write_text(
            (specs / "sl-beside.yaml").read_text() + "  executor:\n    slurm: {time: 10m}\n")
        result = run_ouro("apply", "--yes", "--executor", "slurm", str(specs), env=env)
        assert result.returncode == 0, result.stderr
        assert_invariant(lineage_paths(tmp_path / "state", "sl-beside"), 1)
        assert [line.split()[0] for line in _jobs(other)] == [theirs]  # untouched
        assert not [line for line in _jobs(ours) if line.split()[0] == theirs]
        assert os.environ["SLURM_CONF"] == str(ours.conf)  # what the tests' ouro sees
    finally:
        other.stop()
    assert not other.root.exists()
    assert ours.command("sinfo", "-h", "-o", "%a").stdout.split() == ["up"]


def test_why_a_cluster_cannot_be_brought_up_is_said(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm, no munge here
    reason = unavailable()
    assert reason is not None and "slurmctld" in reason and "apt-get install" in reason
