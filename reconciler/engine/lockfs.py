"""Can the lineage lock be trusted on this filesystem, and across which machines?

The lock (``engine.locks``) is an ``flock``. What that means depends on the filesystem
the lineage lives on, which is read from ``/proc/self/mountinfo`` (the mount with the
longest mount point above the path; it gives the type *and* the mount options, which
decide for NFS and Lustre; ``statfs``'s magic number would give only the type):

- local filesystems (ext4, xfs, btrfs, tmpfs, zfs, ...): exclusive among the processes
  of this machine: safe for the local executor and for a single-node cluster only;
- ``nfs4``: Linux emulates ``flock`` with a whole-file POSIX lock that the server
  arbitrates: exclusive across clients (unless mounted ``local_lock=flock|all``);
  ``nfs`` (v2/v3) the same through the NLM lock manager, unless ``nolock`` or
  ``local_lock=flock|all``;
- ``lustre`` only when mounted ``-o flock`` (``localflock`` is per client, and without
  either ``flock`` fails with ENOSYS);
- ``gpfs``, ``ceph`` (kernel CephFS), ``glusterfs``: cluster-wide ``flock``;
- ``beegfs``, ``cifs``/``smb3``, ``fuse.sshfs``, ``9p``, ``virtiofs`` and other FUSE
  filesystems: ``flock`` is local or unsupported by default: refused.

``OURO_TRUST_LOCKS=1`` overrides a refusal (for a filesystem the admin knows better,
e.g. BeeGFS with ``tuneUseGlobalFileLocks``).

A host-local lock is enough for a cluster all of whose nodes are this machine:
:func:`is_this_host` tells, from a node's names and addresses (``localhost``, this
host's name, or any name that resolves to an address of this machine).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from reconciler.errors import LockError

TRUST_OVERRIDE_ENV = "OURO_TRUST_LOCKS"
MOUNTINFO = Path("/proc/self/mountinfo")

Scope = Literal["host", "cluster", "none"]

LOCAL_TYPES = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay", "jfs",
     "reiserfs", "bcachefs", "ramfs"}
)
CLUSTER_TYPES = frozenset({"gpfs", "ceph", "glusterfs", "fuse.glusterfs", "ocfs2", "gfs2"})


@dataclass(frozen=True)
class LockTrust:
    """Over how many machines an ``flock`` at ``path`` excludes, and why."""

    path: Path
    fstype: str
    mount_point: str
    scope: Scope
    reason: str


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    out, index = [], 0
    while index < len(field):
        if field[index] == "\\" and field[index + 1 : index + 4].isdigit():
            out.append(chr(int(field[index + 1 : index + 4], 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)


def _mount_of(path: Path, mountinfo: str) -> tuple[str, str, set[str]]:
    """(mount point, filesystem type, mount and super options) of the mount holding path."""
    best: tuple[str, str, set[str]] = ("/", "unknown", set())
    target = str(path)
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            options = set(fields[5].split(",")) | set(tail[2].split(","))
            best = (point, tail[0], options)
    return best


def _resolved(path: Path) -> Path:
    """path with its existing part's symlinks resolved (the lineage may not exist yet)."""
    current, rest = Path(os.path.abspath(path)), []
    while not current.exists() and current != current.parent:
        rest.append(current.name)
        current = current.parent
    return current.resolve().joinpath(*reversed(rest))


def classify(fstype: str, options: set[str]) -> tuple[Scope, str]:
    """The scope of an ``flock`` on a filesystem of this type mounted with these options."""
    local_lock = next((o.split("=", 1)[1] for o in options if o.startswith("local_lock=")), "")
    if fstype in ("nfs", "nfs4"):
        if "nolock" in options or local_lock in ("flock", "all"):
            how = f"local_lock={local_lock}" if local_lock else "nolock"
            return "host", f"{fstype} mounted with {how}: flock is local to each client"
        return "cluster", f"{fstype}: flock is a server-arbitrated lock"
    if fstype == "lustre":
        if "flock" in options:
            return "cluster", "lustre mounted -o flock: coherent across clients"
        if "localflock" in options:
            return "host", "lustre mounted -o localflock: flock is local to each client"
        return "none", "lustre mounted without -o flock: flock is not supported"
    if fstype in CLUSTER_TYPES:
        return "cluster", f"{fstype}: flock is cluster-wide"
    if fstype in LOCAL_TYPES:
        return "host", f"{fstype} is a local filesystem: flock excludes on this machine only"
    return "none", f"{fstype}: ouro does not know whether flock excludes there"


def lock_trust(path: Path, *, mountinfo: str | None = None) -> LockTrust:
    """How far a lineage lock under ``path`` can be trusted."""
    where = _resolved(path)
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            mountinfo = ""
    point, fstype, options = _mount_of(where, mountinfo)
    scope, reason = classify(fstype, options)
    return LockTrust(where, fstype, point, scope, reason)


def _local_address(address: str) -> bool:
    """An address of this machine: loopback, or one a socket here can bind to."""
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if parsed.is_loopback:
        return True
    family = socket.AF_INET6 if parsed.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


def is_this_host(name: str) -> bool:
    """Whether the machine known by this name or address (a Slurm node's NodeAddr) is
    this one: this host's name, or a name resolving to addresses of this machine only."""
    if not name:
        return False
    if name in {socket.gethostname(), socket.gethostname().split(".")[0], socket.getfqdn()}:
        return True
    try:
        found = {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(_local_address(address) for address in found)


def require_lock_scope(path: Path, needed: Scope, *, what: str) -> LockTrust:
    """Refuse to run where the lock would not exclude over ``needed`` (host or cluster)."""
    trust = lock_trust(path)
    order = {"none": 0, "host": 1, "cluster": 2}
    if order[trust.scope] >= order[needed] or os.environ.get(TRUST_OVERRIDE_ENV) == "1":
        return trust
    across = "the cluster's nodes" if needed == "cluster" else "the processes of this machine"
    raise LockError(
        f"ouro: {what}: the lineage lock cannot be trusted across {across} at {trust.path} "
        f"({trust.reason}; mounted at {trust.mount_point}): put the state on a filesystem "
        "whose flock excludes there (NFSv4, Lustre with -o flock, GPFS, CephFS; see "
        f"docs/slurm.md), or set {TRUST_OVERRIDE_ENV}=1 if you know it does"
    )


__all__ = ["TRUST_OVERRIDE_ENV", "LockTrust", "classify", "is_this_host", "lock_trust",
           "require_lock_scope"]
