"""Hard ceilings: real cgroup v1 here, fake cgroup trees and fake systemd for the rest."""

from __future__ import annotations

import errno
import os
import resource
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base.config import Ceilings
from reconciler.kernel.base.errors import CeilingError, PreflightError
from reconciler.kernel.sandbox import ceilings as ceilings_module
from reconciler.kernel.sandbox.ceilings import (
    CgroupMounts,
    discover_mounts,
    open_scope,
    reap_stale_scopes,
)
from tests.host import require

HOST = discover_mounts()
V1: dict[str, Path] = {c: HOST.v1[c] for c in ("cpu", "cpuacct", "memory", "pids") if c in HOST.v1}


def unique(prefix: str) -> str:
    """Scope names end in ``.<pid>`` as the kernel's do: another kernel's sweep on this
    host (a concurrent test run) keeps them while this process lives."""
    return f"test-{prefix}-{uuid.uuid4().hex[:12]}.{os.getpid()}"


def cg1(controller: str, name: str) -> Path:
    return V1[controller] / "ouro" / name


def need_cgroup1() -> None:
    require(len(V1) >= 4 and os.access(V1["memory"], os.W_OK),
            "needs writable cgroup v1 cpu, cpuacct, memory, pids hierarchies")


SMALL = Ceilings(wall_seconds=10, cpu_seconds=10, memory_bytes=64 << 20, swap_bytes=0,
                 tasks=16, enforcement="cgroup1")


# ---------------------------------------------------------------- real cgroup v1


@pytest.mark.cgroup
def test_cgroup1_limits_are_read_back_from_the_kernel() -> None:
    need_cgroup1()
    name = unique("readback")
    scope = open_scope(Ceilings(wall_seconds=600, cpu_seconds=120, enforcement="cgroup1"), name)
    try:
        assert scope.backend == "cgroup1"
        assert (cg1("cpu", name) / "cpu.cfs_period_us").read_text().strip() == "100000"
        assert (cg1("cpu", name) / "cpu.cfs_quota_us").read_text().strip() == "20000"  # 20 %
        assert (cg1("memory", name) / "memory.limit_in_bytes").read_text().strip() == str(1 << 30)
        assert (cg1("memory", name) / "memory.memsw.limit_in_bytes").read_text().strip() == str(
            1 << 30)
        assert (cg1("pids", name) / "pids.max").read_text().strip() == "64"
    finally:
        scope.close()
    for controller in V1:
        assert not cg1(controller, name).exists()


@pytest.mark.cgroup
def test_cgroup1_child_starts_inside_every_hierarchy() -> None:
    need_cgroup1()
    name = unique("join")
    scope = open_scope(SMALL, name)
    try:
        proc = scope.popen(["cat", "/proc/self/cgroup"], stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=10)
    finally:
        scope.close()
    lines = out.decode().splitlines()
    for controller in ("cpu", "cpuacct", "memory", "pids"):
        assert any(controller in line.split(":")[1].split(",") and
                   line.endswith(f"/ouro/{name}") for line in lines), (controller, lines)


@pytest.mark.cgroup
def test_prepare_runs_on_the_gated_child_before_its_command(tmp_path: Path) -> None:
    """``prepare(pid)`` sees the child in its scope, waiting at the gate: what it sets
    (here a resource limit) is in force when the command runs; if it raises, the
    command never runs."""
    need_cgroup1()
    seen: list[int] = []

    def prepare(pid: int) -> None:
        seen.append(pid)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (77, 77))

    scope = open_scope(SMALL, unique("prep"))
    try:
        proc = scope.popen(["/bin/sh", "-c", "ulimit -n; ulimit -Hn"], prepare=prepare,
                           stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=10)
    finally:
        scope.close()
    assert seen == [proc.pid] and out.decode().split() == ["77", "77"]

    def refuse(pid: int) -> None:
        raise OSError("refused")

    marker = tmp_path / "ran"
    scope = open_scope(SMALL, unique("prep"))
    try:
        with pytest.raises(OSError, match="refused"):
            scope.popen(["touch", str(marker)], prepare=refuse)
    finally:
        scope.close()
    assert not marker.exists()


@pytest.mark.cgroup
def test_cgroup1_memory_hog_is_oom_killed_and_counted() -> None:
    need_cgroup1()
    scope = open_scope(SMALL, unique("oom"))
    try:
        proc = scope.popen([sys.executable, "-c", "x = bytearray(256 << 20); print('survived')"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        out, _ = proc.communicate(timeout=30)
        accounting = scope.accounting()
    finally:
        scope.close()
    assert proc.returncode == -9
    assert b"survived" not in out
    assert accounting.oom_kills is not None and accounting.oom_kills >= 1
    assert accounting.result == "oom-kill"
    assert accounting.memory_peak_bytes is not None
    assert accounting.memory_peak_bytes <= 64 << 20
    assert accounting.cpu_usage_nsec is not None and accounting.cpu_usage_nsec > 0


@pytest.mark.cgroup
def test_cgroup1_fork_bomb_is_held_by_the_task_ceiling() -> None:
    need_cgroup1()
    name = unique("forks")
    scope = open_scope(SMALL, name)
    bomb = "i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null; echo done"
    try:
        proc = scope.popen(["/bin/sh", "-c", bomb], stdout=subprocess.PIPE)
        deadline = time.monotonic() + 10
        current = 0
        while time.monotonic() < deadline:
            current = int((cg1("pids", name) / "pids.current").read_text())
            if current >= 16:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        tasks = int((cg1("pids", name) / "pids.current").read_text())
        events = (cg1("pids", name) / "pids.events").read_text()
        assert tasks <= 16
        assert current == 16
        assert int(events.split()[1]) >= 1  # "max N": forks refused by pids.max
        scope.kill()
        proc.wait(timeout=10)
        assert (cg1("pids", name) / "cgroup.procs").read_text().strip() == ""
    finally:
        scope.close()
    assert not cg1("pids", name).exists()


@pytest.mark.cgroup
def test_cgroup1_cpu_quota_throttles_a_busy_loop() -> None:
    need_cgroup1()
    quota = Ceilings(wall_seconds=10, cpu_seconds=1, tasks=16, enforcement="cgroup1")  # 10 %
    scope = open_scope(quota, unique("cpu"))
    try:
        started = time.monotonic()
        proc = scope.popen(["/bin/sh", "-c", "while :; do :; done"])
        time.sleep(1.0)
        scope.kill()
        proc.wait(timeout=10)
        elapsed = time.monotonic() - started
        used = scope.accounting().cpu_usage_nsec
    finally:
        scope.close()
    assert used is not None
    assert used <= (0.10 * elapsed + 0.05) * 1e9  # 10 % of one core, plus one period of slack


@pytest.mark.cgroup
def test_cgroup1_value_the_kernel_rounds_is_refused_before_anything_runs() -> None:
    """memory.limit_in_bytes rounds to pages: 64 MiB + 1 reads back as 64 MiB -> refused."""
    need_cgroup1()
    name = unique("round")
    odd = Ceilings(memory_bytes=(64 << 20) + 1, enforcement="cgroup1")
    with pytest.raises(CeilingError, match=r"memory\.limit_in_bytes reads") as caught:
        open_scope(odd, name)
    assert isinstance(caught.value, PreflightError)
    for controller in V1:
        assert not cg1(controller, name).exists()


@pytest.mark.cgroup
def test_cgroup1_scope_names_are_unique() -> None:
    need_cgroup1()
    name = unique("twice")
    first = open_scope(SMALL, name)
    try:
        with pytest.raises(CeilingError, match="already exists"):
            open_scope(SMALL, name)
        assert cg1("memory", name).is_dir()  # the refusal did not tear down the first
    finally:
        first.close()


def first_backend_that_opens_alone() -> str:
    """What auto must pick on this host: the first backend, in auto's documented order
    (systemd, cgroup2, cgroup1), that opens when it is asked for by name."""
    for backend in ("systemd", "cgroup2", "cgroup1"):
        try:
            scope = open_scope(Ceilings(enforcement=backend), unique(f"alone-{backend}"))
        except CeilingError:
            continue
        scope.close()
        return backend
    pytest.fail("no backend opens on its own here; need_cgroup1 should have said so")


@pytest.mark.cgroup
def test_auto_picks_the_first_backend_that_works_here_and_says_so() -> None:
    need_cgroup1()
    expected = first_backend_that_opens_alone()
    if not Path("/run/systemd/system").exists():  # no manager: systemd cannot be first
        assert expected != "systemd"
    scope = open_scope(Ceilings(enforcement="auto"), unique("auto"))
    try:
        assert scope.backend == expected
    finally:
        scope.close()


@pytest.mark.cgroup
@pytest.mark.parametrize("sweep", [False, True], ids=["by-prefix", "every-dead-kernel"])
def test_an_empty_scope_of_a_live_kernel_is_not_reaped(sweep: bool) -> None:
    """Another kernel's scope is empty until its sandbox joins: its owner's pid keeps it."""
    need_cgroup1()
    prefix = unique("owned")
    owner = subprocess.Popen(["sleep", "30"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    waiting = open_scope(SMALL, f"{prefix}.gen1.{owner.pid}")
    abandoned = open_scope(SMALL, f"{prefix}.gen1.{dead.pid}")
    try:
        if sweep:
            reaped = reap_stale_scopes("")
            assert f"{prefix}.gen1.{dead.pid}" in reaped
            assert f"{prefix}.gen1.{owner.pid}" not in reaped
        else:
            assert reap_stale_scopes(prefix) == [f"{prefix}.gen1.{dead.pid}"]
        assert cg1("memory", f"{prefix}.gen1.{owner.pid}").is_dir()
        assert not cg1("memory", f"{prefix}.gen1.{dead.pid}").exists()
    finally:
        owner.kill()
        owner.wait()
        waiting.close()
        abandoned.close()


@pytest.mark.cgroup
def test_a_sweep_never_takes_this_processs_scopes_but_its_own_lineage_may() -> None:
    """Lineages of one apply share its pid: a sweep between another lineage's mkdir and
    its join must not remove that scope; the lineage's own reap (under its lock) may."""
    need_cgroup1()
    prefix = unique("mine")
    name = f"{prefix}.gen1.{os.getpid()}"
    scope = open_scope(SMALL, name)
    try:
        assert name not in reap_stale_scopes("")
        assert cg1("memory", name).is_dir()
        assert reap_stale_scopes(prefix) == [name]
        assert not cg1("memory", name).exists()
    finally:
        scope.close()


@pytest.mark.cgroup
def test_stale_scopes_of_a_dead_kernel_are_reaped_but_live_ones_kept() -> None:
    need_cgroup1()
    prefix = unique("stale")
    stale = open_scope(SMALL, f"{prefix}-gen1-111")  # never closed: its kernel "died"
    live = open_scope(SMALL, f"{prefix}-gen2-222")
    other_name = unique("other")
    other = open_scope(SMALL, other_name)
    proc = live.popen(["sleep", "30"])
    try:
        assert reap_stale_scopes(prefix) == [f"{prefix}-gen1-111"]
        for controller in V1:
            assert not cg1(controller, f"{prefix}-gen1-111").exists()
            assert cg1(controller, f"{prefix}-gen2-222").is_dir()
        assert cg1("memory", other_name).is_dir()
    finally:
        live.kill()
        proc.wait()
        live.close()
        other.close()
        stale.close()


# ---------------------------------------------------------------- real cgroup v2 refusal


@pytest.mark.cgroup
def test_cgroup2_is_refused_with_the_reason_unless_it_has_the_controllers() -> None:
    require(HOST.v2 is not None, "needs a cgroup2 mount")
    offered = set((HOST.v2 / "cgroup.controllers").read_text().split())
    if {"cpu", "memory", "pids"} <= offered:  # a host where cgroup2 works: use it for real
        scope = open_scope(Ceilings(enforcement="cgroup2"), unique("v2"))
        try:
            assert scope.backend == "cgroup2"
        finally:
            scope.close()
        return
    with pytest.raises(CeilingError, match=r"cgroup2: .* offers controllers .* needs"):
        open_scope(Ceilings(enforcement="cgroup2"), unique("v2"))


# ---------------------------------------------------------------- refusals, no host needed


@pytest.mark.parametrize(
    "name", ["", "../escape", "a/b", "UPPER", "-dash", "a..b", "x" * 101, "sp ace", "é"],
    ids=["empty", "dotdot", "slash", "upper", "leading-dash", "double-dot", "too-long",
         "space", "non-ascii"],
)
def test_unsafe_scope_names_are_refused(name: str) -> None:
    with pytest.raises(CeilingError, match="scope name"):
        open_scope(Ceilings(), name, mounts=CgroupMounts())


def test_no_backend_names_why_each_failed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ceilings_module, "SYSTEM_MANAGER_MARK", tmp_path / "absent")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(CeilingError) as caught:
        open_scope(Ceilings(enforcement="auto"), "nothing", mounts=CgroupMounts())
    message = str(caught.value)
    assert "aggregate resource scope" in message
    assert "systemd: " in message and "manager" in message
    assert "cgroup2: no cgroup2 mount" in message
    assert "cgroup1: no cgroup v1 hierarchy" in message


@pytest.mark.parametrize(
    ("ceilings", "message"),
    [(Ceilings(enforcement="docker"), "unknown ceiling enforcement 'docker'"),
     (Ceilings(tasks=0), "ceiling tasks must be positive, got 0"),
     (Ceilings(memory_bytes=0), "ceiling memory_bytes must be positive, got 0"),
     (Ceilings(swap_bytes=-1), "ceiling swap_bytes must be >= 0, got -1"),
     (Ceilings(cpu_seconds=0), "ceiling cpu_seconds must be positive, got 0")],
    ids=["unknown-enforcement", "zero-tasks", "zero-memory", "negative-swap", "zero-cpu"],
)
def test_impossible_ceilings_are_refused(ceilings: Ceilings, message: str) -> None:
    """Refused for the value itself, before any backend is tried (with no mounts, a
    valid ceiling fails too, but with "cannot put the aggregate resource scope")."""
    with pytest.raises(CeilingError) as caught:
        open_scope(ceilings, "bad", mounts=CgroupMounts())
    assert message in str(caught.value)
    assert "aggregate resource scope" not in str(caught.value)


# ---------------------------------------------------------------- fake cgroup trees

V1_FILES = {
    "cpu": ["cpu.cfs_period_us", "cpu.cfs_quota_us"],
    "cpuacct": ["cpuacct.usage"],
    "memory": ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes",
               "memory.max_usage_in_bytes", "memory.oom_control"],
    "pids": ["pids.max"],
}
V2_FILES = ["cpu.max", "memory.max", "memory.swap.max", "pids.max", "cpu.stat",
            "memory.peak", "memory.events"]


def fake_mkdir(files: list[str], *, ignore_writes: bool) -> object:
    def make(path: Path) -> None:
        path.mkdir()
        (path / "cgroup.procs").write_text("")
        for name in files:
            if ignore_writes:
                (path / name).symlink_to("/dev/null")
            else:
                (path / name).write_text("max\n")
    return make


def fake_v1(tmp_path: Path) -> CgroupMounts:
    mounts = {c: tmp_path / c for c in V1_FILES}
    for folder in mounts.values():
        folder.mkdir()
    return CgroupMounts(v1=mounts)


def test_cgroup1_fake_tree_that_ignores_writes_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mounts = fake_v1(tmp_path)
    all_files = [f for files in V1_FILES.values() for f in files]
    monkeypatch.setattr(ceilings_module, "_make_group", fake_mkdir(all_files, ignore_writes=True))
    with pytest.raises(CeilingError, match="limits not in force") as caught:
        open_scope(SMALL, "ignored", mounts=mounts)
    assert "cpu.cfs_quota_us reads ''" in str(caught.value)


def test_cgroup1_fake_tree_without_control_files_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CeilingError, match="cannot open"):
        open_scope(SMALL, "plain", mounts=fake_v1(tmp_path))


def test_cgroup1_fake_tree_gets_every_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mounts = fake_v1(tmp_path)
    all_files = [f for files in V1_FILES.values() for f in files]
    monkeypatch.setattr(ceilings_module, "_make_group", fake_mkdir(all_files, ignore_writes=False))
    ceilings = Ceilings(cpu_seconds=30, wall_seconds=60, memory_bytes=1 << 30,
                        swap_bytes=1 << 20, tasks=7, enforcement="cgroup1")
    scope = open_scope(ceilings, "values", mounts=mounts)
    group = {c: tmp_path / c / "ouro" / "values" for c in V1_FILES}
    assert (group["cpu"] / "cpu.cfs_quota_us").read_text() == "50000"
    assert (group["memory"] / "memory.memsw.limit_in_bytes").read_text() == str((1 << 30)
                                                                                + (1 << 20))
    assert (group["pids"] / "pids.max").read_text() == "7"
    (group["cpuacct"] / "cpuacct.usage").write_text("123456\n")
    (group["memory"] / "memory.max_usage_in_bytes").write_text("4096\n")
    (group["memory"] / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    accounting = scope.accounting()
    assert (accounting.cpu_usage_nsec, accounting.memory_peak_bytes, accounting.oom_kills,
            accounting.result) == (123456, 4096, 2, "oom-kill")


def fake_v2(tmp_path: Path, controllers: str = "cpu memory pids hugetlb") -> CgroupMounts:
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("\n")
    return CgroupMounts(v2=root)


def test_cgroup2_fake_tree_gets_every_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mounts = fake_v2(tmp_path)
    assert mounts.v2 is not None
    (mounts.v2 / "ouro").mkdir()
    (mounts.v2 / "ouro" / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(ceilings_module, "_make_group", fake_mkdir(V2_FILES, ignore_writes=False))
    scope = open_scope(Ceilings(enforcement="cgroup2", tasks=9), "v2fake", mounts=mounts)
    assert scope.backend == "cgroup2"
    group = mounts.v2 / "ouro" / "v2fake"
    assert (group / "cpu.max").read_text() == "20000 100000"
    assert (group / "memory.max").read_text() == str(1 << 30)
    assert (group / "memory.swap.max").read_text() == "0"
    assert (group / "pids.max").read_text() == "9"
    assert (mounts.v2 / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (mounts.v2 / "ouro" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    (group / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\n")
    (group / "memory.peak").write_text("8192\n")
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    accounting = scope.accounting()
    assert (accounting.cpu_usage_nsec, accounting.memory_peak_bytes, accounting.oom_kills,
            accounting.result) == (1_500_000, 8192, 1, "oom-kill")


def test_auto_prefers_cgroup2_to_cgroup1_when_both_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Auto's order, where this host cannot show it (its cgroup2 has no controllers)."""
    monkeypatch.setattr(ceilings_module, "SYSTEM_MANAGER_MARK", tmp_path / "absent")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no user manager either
    v2 = fake_v2(tmp_path)
    assert v2.v2 is not None
    (v2.v2 / "ouro").mkdir()
    (v2.v2 / "ouro" / "cgroup.subtree_control").write_text("")
    both = CgroupMounts(v1=fake_v1(tmp_path).v1, v2=v2.v2)
    all_files = [f for files in V1_FILES.values() for f in files] + V2_FILES
    monkeypatch.setattr(ceilings_module, "_make_group", fake_mkdir(all_files, ignore_writes=False))
    assert open_scope(Ceilings(enforcement="cgroup1"), "one", mounts=both).backend == "cgroup1"
    assert open_scope(Ceilings(enforcement="auto"), "auto", mounts=both).backend == "cgroup2"


def test_cgroup2_fake_tree_that_ignores_writes_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mounts = fake_v2(tmp_path)
    assert mounts.v2 is not None
    (mounts.v2 / "ouro").mkdir()
    (mounts.v2 / "ouro" / "cgroup.subtree_control").write_text("cpu memory pids")
    monkeypatch.setattr(ceilings_module, "_make_group", fake_mkdir(V2_FILES, ignore_writes=True))
    with pytest.raises(CeilingError, match=r"cgroup2: limits not in force: .*cpu.max reads ''"):
        open_scope(Ceilings(enforcement="cgroup2"), "v2ignored", mounts=mounts)


def test_cgroup2_fake_tree_without_controllers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CeilingError, match=r"offers controllers \['hugetlb'\]"):
        open_scope(Ceilings(enforcement="cgroup2"), "v2none",
                   mounts=fake_v2(tmp_path, controllers="hugetlb"))


# ---------------------------------------------------------------- systemd, faked like seed 000

FAKE_SYSTEMD_RUN = """#!/bin/sh
FAKE_DIR="${FAKE_DIR:-@FAKE_DIR@}"
printf '%s\\n' "$@" > "$FAKE_DIR/systemd-run-args"
if [ "${FAKE_SCOPE_FAIL:-0}" = 1 ]; then
  echo "Failed to start transient scope unit" >&2
  exit 1
fi
touch "$FAKE_DIR/scope-started"
while [ "$#" -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -p) shift 2 ;;
    *) shift ;;
  esac
done
exec "$@"
"""

FAKE_SYSTEMCTL = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_DIR/systemctl-calls"
for arg in "$@"; do
  case "$arg" in
    show)
      state=inactive; [ -e "$FAKE_DIR/scope-started" ] && state=active
      printf 'ActiveState=%s\\nControlGroup=/system.slice/%s\\n' "$state" "$UNIT"
      printf 'MemoryMax=%s\\nTasksMax=%s\\n' "${FAKE_MEMORY_MAX:-1073741824}" "${FAKE_TASKS:-64}"
      printf 'CPUUsageNSec=12000000\\nMemoryPeak=4194304\\nOOMKills=%s\\n' "${FAKE_OOM:-0}"
      printf 'Result=success\\n'
      exit 0 ;;
  esac
done
exit 0
"""


@pytest.fixture
def fake_systemd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("systemd-run", FAKE_SYSTEMD_RUN), ("systemctl", FAKE_SYSTEMCTL)):
        path = bin_dir / name
        path.write_text(textwrap.dedent(body).replace("@FAKE_DIR@", str(tmp_path)))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    mark = tmp_path / "run-systemd-system"
    mark.mkdir()
    monkeypatch.setattr(ceilings_module, "SYSTEM_MANAGER_MARK", mark)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    return tmp_path


def systemd_cgroup(root: Path, unit: str, *, cpu: str = "20000 100000", memory: str = "1073741824",
                   swap: str = "0", pids: str = "64") -> CgroupMounts:
    group = root / "unified" / "system.slice" / unit
    group.mkdir(parents=True)
    for name, value in (("cpu.max", cpu), ("memory.max", memory), ("memory.swap.max", swap),
                        ("pids.max", pids)):
        (group / name).write_text(value + "\n")
    return CgroupMounts(v2=root / "unified")


def test_systemd_scope_arguments_and_accounting(
    fake_systemd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNIT", "ouro-sd1.scope")
    mounts = systemd_cgroup(fake_systemd, "ouro-sd1.scope")
    scope = open_scope(Ceilings(enforcement="systemd"), "sd1", mounts=mounts)
    assert scope.backend == "systemd"
    proc = scope.popen(["/bin/sh", "-c", "echo inside; exit 9"], stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 9  # the process's own status, not the unit's
    assert out == b"inside\n"
    args = (fake_systemd / "systemd-run-args").read_text().splitlines()
    for expected in ("--scope", "--unit=ouro-sd1.scope", "RuntimeMaxSec=600", "CPUQuota=20%",
                     "MemoryMax=1G", "MemorySwapMax=0", "TasksMax=64"):
        assert expected in args
    assert "--user" not in args  # root: the system manager
    accounting = scope.accounting()
    assert (accounting.cpu_usage_nsec, accounting.memory_peak_bytes, accounting.oom_kills,
            accounting.result) == (12000000, 4194304, 0, "success")
    scope.close()
    calls = (fake_systemd / "systemctl-calls").read_text()
    assert "stop ouro-sd1.scope" in calls


def test_systemd_scope_runs_prepare_before_its_command(
    fake_systemd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNIT", "ouro-sd5.scope")
    mounts = systemd_cgroup(fake_systemd, "ouro-sd5.scope")
    scope = open_scope(Ceilings(enforcement="systemd"), "sd5", mounts=mounts)

    def prepare(pid: int) -> None:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (55, 55))

    proc = scope.popen(["/bin/sh", "-c", "ulimit -n; ulimit -Hn"], prepare=prepare,
                       stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=10)
    scope.close()
    assert out.decode().split() == ["55", "55"]


def test_systemd_expand_environment_flag_when_supported(
    fake_systemd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = fake_systemd / "bin" / "systemd-run"
    run.write_text(run.read_text().replace(
        "#!/bin/sh\n", '#!/bin/sh\n[ "$1" = --help ] && { echo "  --expand-environment=BOOL"; '
        "exit 0; }\n", 1))
    monkeypatch.setenv("UNIT", "ouro-sd2.scope")
    mounts = systemd_cgroup(fake_systemd, "ouro-sd2.scope")
    scope = open_scope(Ceilings(enforcement="systemd"), "sd2", mounts=mounts)
    proc = scope.popen(["true"])
    proc.wait(timeout=10)
    scope.close()
    assert "--expand-environment=no" in (fake_systemd / "systemd-run-args").read_text().split()


def test_systemd_scope_failure_is_a_preflight_error_and_nothing_runs(
    fake_systemd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNIT", "ouro-sd3.scope")
    monkeypatch.setenv("FAKE_SCOPE_FAIL", "1")
    mounts = systemd_cgroup(fake_systemd, "ouro-sd3.scope")
    scope = open_scope(Ceilings(enforcement="systemd"), "sd3", mounts=mounts)
    marker = fake_systemd / "ran"
    with pytest.raises(PreflightError, match="aggregate resource scope"):
        scope.popen(["touch", str(marker)], stderr=subprocess.DEVNULL)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("override", "env", "problem"),
    [
        ({"memory": "max"}, {}, "memory.max reads 'max'"),
        ({"pids": "max"}, {}, "pids.max reads 'max'"),
        ({"cpu": "max 100000"}, {}, "cpu.max reads 'max 100000'"),
        ({}, {"FAKE_TASKS": "infinity"}, "TasksMax=infinity"),
    ],
    ids=["memory-not-delegated", "pids-not-delegated", "cpu-not-delegated", "tasks-property"],
)
def test_systemd_limits_it_ignores_are_refused_before_the_child_runs(
    fake_systemd: Path, monkeypatch: pytest.MonkeyPatch, override: dict[str, str],
    env: dict[str, str], problem: str,
) -> None:
    monkeypatch.setenv("UNIT", "ouro-sd4.scope")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    mounts = systemd_cgroup(fake_systemd, "ouro-sd4.scope", **override)
    scope = open_scope(Ceilings(enforcement="systemd"), "sd4", mounts=mounts)
    marker = fake_systemd / "ran"
    with pytest.raises(CeilingError, match="does not enforce") as caught:
        scope.popen(["touch", str(marker)])
    assert problem in str(caught.value)
    assert not marker.exists()


def test_systemd_without_a_manager_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ceilings_module, "SYSTEM_MANAGER_MARK", tmp_path / "absent")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(CeilingError, match=r"systemd: .*no systemd manager runs"):
        open_scope(Ceilings(enforcement="systemd"), "nosd", mounts=CgroupMounts())


def test_systemd_user_manager_gets_its_bus_but_nothing_else(
    fake_systemd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    (fake_systemd / "systemd").mkdir()
    (fake_systemd / "systemd" / "private").write_text("")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(fake_systemd))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("UNIT", "ouro-sd5.scope")
    mounts = systemd_cgroup(fake_systemd, "ouro-sd5.scope")
    scope = open_scope(Ceilings(enforcement="systemd"), "sd5", mounts=mounts)
    proc = scope.popen(["/usr/bin/env"], stdout=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"})
    out, _ = proc.communicate(timeout=10)
    scope.close()
    assert "--user" in (fake_systemd / "systemd-run-args").read_text().split()
    assert f"XDG_RUNTIME_DIR={fake_systemd}".encode() in out
    assert b"sk-secret" not in out


@pytest.mark.parametrize(
    ("failures", "code", "calls", "made"),
    [
        ([errno.EBUSY, errno.EAGAIN], None, 3, True),
        ([errno.EBUSY] * 4, errno.EBUSY, 4, False),
        ([errno.EACCES], errno.EACCES, 1, False),
    ],
    ids=["busy-then-free", "busy-too-long", "denied-is-final"],
)
def test_cgroup_creation_retries_only_a_busy_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: list[int], code: int | None,
    calls: int, made: bool,
) -> None:
    from reconciler.kernel.sandbox import ceilings

    real_mkdir = os.mkdir
    seen: list[str] = []

    def flaky_mkdir(path: Any, mode: int = 0o777) -> None:
        seen.append(str(path))
        if len(seen) <= len(failures):
            raise OSError(failures[len(seen) - 1], os.strerror(failures[len(seen) - 1]))
        real_mkdir(path, mode)

    monkeypatch.setattr(ceilings.os, "mkdir", flaky_mkdir)
    target = tmp_path / "group"
    if code is None:
        ceilings._make_group(target)
    else:
        with pytest.raises(OSError) as caught:
            ceilings._make_group(target)
        assert caught.value.errno == code
    assert len(seen) == calls
    assert target.is_dir() == made


@pytest.mark.cgroup
def test_the_sweep_of_dead_kernels_scopes_runs_once_per_apply(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Physics release 5: every generation asks for the sweep; this process makes it at
    most once per SWEEP_INTERVAL_S (once per apply), a lineage's own reap every time."""
    need_cgroup1()
    monkeypatch.setattr(ceilings_module, "_swept_at", [])
    prefix = unique("seldom")
    names = []
    for _ in range(3):
        dead = subprocess.Popen(["true"])
        dead.wait()
        names.append(f"{prefix}.gen1.{dead.pid}")
    scopes = [open_scope(SMALL, names[0])]
    try:
        assert names[0] in ceilings_module.sweep_stale_scopes_seldom("")  # the first sweep
        scopes.append(open_scope(SMALL, names[1]))
        assert ceilings_module.sweep_stale_scopes_seldom("") == []  # the next generation's: none
        assert cg1("memory", names[1]).is_dir()
        assert ceilings_module.sweep_stale_scopes_seldom(prefix) == [names[1]]  # its own: always
        scopes.append(open_scope(SMALL, names[2]))
        monkeypatch.setattr(ceilings_module, "SWEEP_INTERVAL_S", 0.0)  # the interval has passed
        assert names[2] in ceilings_module.sweep_stale_scopes_seldom("")
    finally:
        for scope in scopes:
            scope.close()
