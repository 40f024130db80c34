"""The Slurm tests' cluster: one of the suite's own for the session, started on first use.

Only a session that selects a test of this folder brings the cluster up (the fixture is
lazy); it is stopped at the session's end. Where it cannot be brought up, the reason is
found once and every Slurm test reports it through ``tests.host.require`` (a failure
under CI, a skip elsewhere). Each test sees the cluster through ``SLURM_CONF`` in its
environment, which the ``env`` of its ouro processes copies.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.host import require
from tests.slurm.cluster import Cluster, ClusterError, start_cluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster | str]:
    """The running cluster, or why there is none (one attempt per session)."""
    try:
        cluster = start_cluster()
    except ClusterError as error:
        yield f"a Slurm cluster of the test suite's own: {error}"
        return
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(autouse=True)
def _on_the_suites_cluster(slurm_cluster: Cluster | str,
                           monkeypatch: pytest.MonkeyPatch) -> Cluster:
    require(isinstance(slurm_cluster, Cluster), str(slurm_cluster))
    assert isinstance(slurm_cluster, Cluster)
    for name, value in slurm_cluster.environ().items():
        monkeypatch.setenv(name, value)
    return slurm_cluster
