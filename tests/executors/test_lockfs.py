"""Where the lineage lock can be trusted: the filesystem table, from real mountinfo lines."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from reconciler.engine.lockfs import (
    TRUST_OVERRIDE_ENV,
    is_this_host,
    lock_trust,
    require_lock_scope,
)
from reconciler.errors import LockError
from tests.host import require


def _mountinfo(*mounts: tuple[str, str, str, str]) -> str:
    """(mount point, fstype, mount options, super options) -> mountinfo lines."""
    return "".join(
        f"{20 + i} 1 0:{i} / {point} {options} shared:1 - {fstype} src {super_options}\n"
        for i, (point, fstype, options, super_options) in enumerate(mounts)
    )


BASE = ("/", "ext4", "rw,relatime", "rw")


@pytest.mark.parametrize(
    ("fstype", "options", "super_options", "scope"),
    [
        ("nfs4", "rw,relatime", "rw,vers=4.2,hard,proto=tcp", "cluster"),
        ("nfs4", "rw,relatime", "rw,vers=4.2,local_lock=flock", "host"),
        ("nfs", "rw", "rw,vers=3,nolock", "host"),
        ("nfs", "rw", "rw,vers=3,local_lock=none", "cluster"),
        ("lustre", "rw", "rw,flock,lazystatfs", "cluster"),
        ("lustre", "rw", "rw,localflock", "host"),
        ("lustre", "rw", "rw,lazystatfs", "none"),
        ("gpfs", "rw", "rw", "cluster"),
        ("ceph", "rw", "rw,name=admin", "cluster"),
        ("beegfs", "rw", "rw,cfgFile=/etc/beegfs/beegfs-client.conf", "none"),
        ("cifs", "rw", "rw,vers=3.0", "none"),
        ("fuse.sshfs", "rw", "rw,user_id=0", "none"),
        ("tmpfs", "rw", "rw,size=1g", "host"),
        ("xfs", "rw", "rw,attr2", "host"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 12 else None,
)
def test_the_scope_of_flock_by_filesystem(fstype: str, options: str, super_options: str,
                                          scope: str) -> None:
    info = _mountinfo(BASE, ("/shared", fstype, options, super_options))
    trust = lock_trust(Path("/shared/ouro/lineages/x.git"), mountinfo=info)
    assert (trust.fstype, trust.mount_point, trust.scope) == (fstype, "/shared", scope)
    assert trust.reason


def test_the_longest_mount_point_wins_and_escapes_are_read() -> None:
    info = _mountinfo(BASE, ("/scratch", "lustre", "rw", "rw,flock"),
                      ("/scratch/my\\040dir", "tmpfs", "rw", "rw"))
    assert lock_trust(Path("/scratch/my dir/a"), mountinfo=info).fstype == "tmpfs"
    assert lock_trust(Path("/scratch/other"), mountinfo=info).fstype == "lustre"
    assert lock_trust(Path("/scratchy"), mountinfo=info).fstype == "ext4"


def test_a_path_not_yet_created_is_judged_by_its_existing_parent(tmp_path: Path) -> None:
    trust = lock_trust(tmp_path / "not" / "yet" / "there.git")
    assert trust.path == tmp_path.resolve() / "not" / "yet" / "there.git"
    assert trust.scope in ("host", "cluster")  # this machine's real /proc/self/mountinfo


def test_a_host_local_filesystem_is_refused_for_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRUST_OVERRIDE_ENV, raising=False)
    require(lock_trust(tmp_path).scope == "host",
            "the test's tmp dir on a host-local filesystem (it is on a cluster one)")
    with pytest.raises(LockError) as caught:
        require_lock_scope(tmp_path, "cluster", what="lineage x (x.yaml:1)")
    message = str(caught.value)
    assert "lineage x (x.yaml:1)" in message
    assert "cannot be trusted across the cluster's nodes" in message
    assert TRUST_OVERRIDE_ENV in message and "docs/slurm.md" in message
    assert require_lock_scope(tmp_path, "host", what="x").scope == "host"
    monkeypatch.setenv(TRUST_OVERRIDE_ENV, "1")
    assert require_lock_scope(tmp_path, "cluster", what="x").path == tmp_path.resolve()


def test_this_host_is_known_by_its_names_and_addresses() -> None:
    """A single-node cluster's node may be at localhost, at this host's name, or at an
    address of this machine: each is this host (its lock holds)."""
    assert is_this_host("localhost")
    assert is_this_host(socket.gethostname())
    assert is_this_host("127.0.0.1") and is_this_host("127.0.1.1") and is_this_host("::1")
    # TEST-NET-1 (RFC 5737) is never an address of this machine: binding to it fails,
    # nothing is sent
    assert not is_this_host("192.0.2.7")
    assert not is_this_host("")
