"""Each ceilings backend for real, wherever the host offers it; where it does not, the real
refusal, checked against what the host has (not against a stand-in).

Whether the host offers a backend is decided here from the host itself, not by asking
the kernel: cgroup1 needs writable v1 cpu, cpuacct, memory and pids hierarchies;
cgroup2 a cgroup2 mount whose cgroup.controllers has cpu, memory and pids; systemd
`systemd-run` and a running manager (root: the system manager, /run/systemd/system;
anyone else: the user manager's socket). CI's machine offers cgroup1 only
(docs/architecture.md says why the other two cannot exist there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from reconciler.kernel.base.config import Ceilings
from reconciler.kernel.base.errors import CeilingError
from reconciler.kernel.sandbox.ceilings import discover_mounts, open_scope
from tests.host import require

HOST = discover_mounts()
LIMITED = ("cpu", "memory", "pids")


def offered(backend: str) -> tuple[bool, str]:
    """Does this host offer the backend, and if not, what it has instead."""
    if backend == "cgroup1":
        v1 = {c: HOST.v1.get(c) for c in ("cpu", "cpuacct", "memory", "pids")}
        missing = [c for c, path in v1.items() if path is None or not os.access(path, os.W_OK)]
        return not missing, f"no writable cgroup v1 {', '.join(missing)}"
    if backend == "cgroup2":
        if HOST.v2 is None:
            return False, "no cgroup2 mount"
        controllers = set((HOST.v2 / "cgroup.controllers").read_text().split())
        return set(LIMITED) <= controllers, f"{HOST.v2} offers controllers"
    if shutil.which("systemd-run") is None:
        return False, "systemd-run or systemctl is not installed"
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    mark = Path("/run/systemd/system") if os.geteuid() == 0 else (
        Path(runtime) / "systemd" / "private")
    return mark.exists(), "manager runs"


def unique(backend: str) -> str:
    return f"test-real-{backend}-{uuid.uuid4().hex[:10]}.{os.getpid()}"


SMALL = dict(wall_seconds=20, cpu_seconds=20, memory_bytes=64 << 20, swap_bytes=0, tasks=16)


@pytest.mark.cgroup
@pytest.mark.parametrize("backend", ["cgroup1", "cgroup2", "systemd"])
def test_each_backend_for_real_or_its_real_refusal(backend: str) -> None:
    here, instead = offered(backend)
    if backend == "cgroup1":  # CI's backend: its absence fails under CI
        require(here, f"needs {instead}")
    ceilings = Ceilings(enforcement=backend, **SMALL)  # type: ignore[arg-type]
    name = unique(backend)
    if not here:
        with pytest.raises(CeilingError) as caught:
            open_scope(ceilings, name)
        assert f"{backend}: " in str(caught.value) and instead in str(caught.value)
        if backend == "systemd" and os.geteuid() == 0:
            assert Path("/proc/1/comm").read_text().strip() != "systemd"
        return
    scope = open_scope(ceilings, name)
    try:
        assert scope.backend == backend
        inside = scope.popen(["cat", "/proc/self/cgroup"], stdout=subprocess.PIPE)
        where = inside.communicate(timeout=30)[0].decode()
    finally:
        scope.close()
    assert name in where, where  # the child ran in the scope it was given
    hog = open_scope(ceilings, unique(backend))
    try:
        proc = hog.popen([sys.executable, "-c", "x = bytearray(256 << 20); print('survived')"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        out, _ = proc.communicate(timeout=60)
    finally:
        hog.close()
    assert proc.returncode != 0 and b"survived" not in out  # the memory ceiling held
