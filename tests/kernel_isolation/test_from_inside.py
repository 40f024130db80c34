"""The sandbox's isolation, shown from inside a real life (not as bwrap's arguments).

The kernel's own sandbox entry runs as a life does (the confinement prelude, bwrap with
the seccomp filter, a fresh session keyring, a real cgroup scope), with exactly the
kernel's command line, but with a probe script in place of the runner
(`/kernel/probe.sh` instead of `/kernel/runner.sh`). The probe reports what the life
sees: its processes, its capabilities, its namespaces, the System V IPC objects, its
terminal; then it runs `kill -9 -1`, and the test checks that a process it started on
the host is still alive.

`kill -9 -1` is safe only inside a PID namespace: outside one it kills every process of
the user on the host. So the probe first checks that its PID namespace is not the host's
(the host passes its own namespace id) and that pid 1 is the sandbox's init, and
refuses, before any signal, when either check fails; the test then fails. The guard's
refusal is itself tested by making it see a fake "not isolated" answer: nothing in that
test can reach the host.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import pty
import random
import shutil
import socket
import subprocess
import termios
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.kernel.base.config import Ceilings
from reconciler.kernel.base.errors import CeilingError
from reconciler.kernel.sandbox import life as sandbox
from reconciler.kernel.sandbox.ceilings import open_scope
from reconciler.kernel.sandbox.life import HOSTNAME, SANDBOX_PATH, keyring
from tests.host import require

CEILINGS = Ceilings(wall_seconds=30, cpu_seconds=30, memory_bytes=256 << 20, tasks=32,
                    worktree_bytes=4 << 20, tmp_bytes=2 << 20, run_bytes=1 << 20)
REFUSED = 3  # the probe's exit status when the guard refuses

PROBE = r"""set -u
. /kernel/host.env
inside=$(readlink /proc/self/ns/pid)
if [ -n "${FAKE_INSIDE_PIDNS:-}" ]; then inside=$FAKE_INSIDE_PIDNS; fi
init=$(cat /proc/1/comm)
if [ "$inside" = "$HOST_PIDNS" ] || [ "$init" != bwrap ]; then
  echo "refused=pid namespace $inside (host $HOST_PIDNS), pid 1 is $init"
  exit 3
fi
echo "pidns=$inside"
sleep 60 &
child=$!
for d in /proc/[0-9]*; do
  echo "proc=${d#/proc/} $(cat "$d/comm" 2>/dev/null) $(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)"
done
grep '^Cap' /proc/self/status | sed 's/^/cap=/'
echo "hostname=$(cat /proc/sys/kernel/hostname)"
echo "utsns=$(readlink /proc/self/ns/uts)"
echo "ipcns=$(readlink /proc/self/ns/ipc)"
sed 's/^/shm=/' /proc/sysvipc/shm
sed 's/^/msg=/' /proc/sysvipc/msg
echo "stat=$(cat /proc/self/stat)"
if (exec 3</dev/tty) 2>/dev/null; then echo tty=reachable; else echo tty=unreachable; fi
kill -9 -1 2>/dev/null
echo "killed=$?"
wait "$child"
echo "child=$?"
"""


@dataclass
class Life:
    status: int
    lines: list[str]
    stderr: str

    def values(self, key: str) -> list[str]:
        return [line.split("=", 1)[1] for line in self.lines if line.startswith(key + "=")]

    def value(self, key: str) -> str:
        (found,) = self.values(key)
        return found


def _host_ids() -> dict[str, str]:
    return {name: os.readlink(f"/proc/self/ns/{name}") for name in ("pid", "uts", "ipc")}


def _with_terminal(slave: str) -> Callable[[], None]:
    """After the child's setsid: make the pty its controlling terminal, so that only the
    sandbox's own new session can take the terminal away."""
    def acquire() -> None:
        fd = os.open(slave, os.O_RDWR)
        fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
        os.close(fd)
    return acquire


def live(tmp_path: Path, fake_inside_pidns: str = "") -> Life:
    """One life as the kernel starts it (the confinement prelude, bwrap with the seccomp
    filter, a fresh session keyring, a real scope), the probe in place of the runner."""
    require(shutil.which("bwrap") is not None, "needs bubblewrap")
    kernel_dir = tmp_path / f"kernel-{uuid.uuid4().hex[:8]}"
    kernel_dir.mkdir()
    (kernel_dir / "probe.sh").write_text(PROBE)
    (kernel_dir / "host.env").write_text(
        f"HOST_PIDNS='{_host_ids()['pid']}'\nFAKE_INSIDE_PIDNS='{fake_inside_pidns}'\n")
    seccomp_fd = sandbox._filter_fd()
    argv = sandbox.life_argv(kernel_dir=kernel_dir, ceilings=CEILINGS, seccomp_fd=seccomp_fd)
    assert argv[-3:] == ["--", "/bin/sh", "/kernel/runner.sh"], argv[-3:]
    argv[-1] = "/kernel/probe.sh"
    try:
        scope = open_scope(CEILINGS, f"test-isolation-{uuid.uuid4().hex[:12]}.{os.getpid()}")
    except CeilingError as error:
        os.close(seccomp_fd)
        require(False, f"needs a backend for the ceilings (root with writable cgroups): {error}")
        raise
    master, slave = pty.openpty()

    def spawn() -> subprocess.Popen[bytes]:
        return scope.popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, close_fds=True, pass_fds=(seccomp_fd,),
                           env={"PATH": SANDBOX_PATH}, cwd="/", start_new_session=True,
                           preexec_fn=_with_terminal(os.ttyname(slave)))

    try:
        proc = keyring.in_fresh_session_keyring(spawn)
        out, err = proc.communicate(timeout=60)
    finally:
        scope.close()
        for fd in (master, slave, seccomp_fd):
            os.close(fd)
    return Life(proc.returncode, out.decode("utf-8", "replace").splitlines(),
                err.decode("utf-8", "replace"))


@pytest.fixture
def host_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this user on the host, recognisable by its argument."""
    marker = f"300.{random.randrange(10**8, 10**9)}"
    process = subprocess.Popen(["sleep", marker])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


class SysV:
    """A System V shared-memory segment and message queue on the host, removed after."""

    IPC_CREAT, IPC_RMID = 0o1000, 0

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.key = random.randrange(10**8, 2**31 - 1)
        self.shm = self.libc.shmget(self.key, 4096, self.IPC_CREAT | 0o600)
        self.msg = self.libc.msgget(self.key, self.IPC_CREAT | 0o600)
        assert self.shm >= 0 and self.msg >= 0, os.strerror(ctypes.get_errno())

    def close(self) -> None:
        self.libc.shmctl(self.shm, self.IPC_RMID, None)
        self.libc.msgctl(self.msg, self.IPC_RMID, None)


def _keys(lines: list[str]) -> set[str]:
    """The keys of /proc/sysvipc/{shm,msg} lines (header dropped)."""
    return {line.split()[0] for line in lines if line.split() and line.split()[0] != "key"}


@pytest.fixture(scope="module")
def inside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Life, str, SysV]]:
    """One life for every property: the host process and the SysV objects exist during it."""
    marker = f"300.{random.randrange(10**8, 10**9)}"
    process = subprocess.Popen(["sleep", marker])
    sysv = SysV()
    try:
        life = live(tmp_path_factory.mktemp("isolation"))
        alive_after = process.poll() is None
    finally:
        sysv.close()
        process.kill()
        process.wait()
    if life.status == REFUSED:
        pytest.fail("the PID namespace is not in effect: the probe refused before any "
                    f"signal ({life.value('refused')})")
    assert life.status == 0, life.stderr
    assert alive_after, "kill -9 -1 inside the sandbox killed a process on the host"
    yield life, marker, sysv


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_the_life_sees_itself_and_its_children_only(inside: tuple[Life, str, SysV]) -> None:
    life, marker, _ = inside
    assert life.value("pidns") != _host_ids()["pid"]
    processes = {int(line.split()[0]): line.split()[1:] for line in life.values("proc")}
    assert processes[1][0] == "bwrap"  # pid 1 is the sandbox's init
    assert processes[2][:3] == ["sh", "/bin/sh", "/kernel/probe.sh"]  # the probe itself
    children = [words for pid, words in processes.items() if pid > 2]
    assert ["sleep", "sleep", "60"] in children  # its child, started before the listing
    assert {words[0] for words in processes.values()} <= {"bwrap", "sh", "sleep", "cat", "tr"}
    assert len(processes) <= 6, processes
    assert not any(marker in words for words in processes.values())  # the host's sleep


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_kill_minus_one_inside_leaves_the_hosts_processes(
    inside: tuple[Life, str, SysV], host_process: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    life, _, _ = inside
    # kill -9 -1 reached every process of the sandbox (its child died of SIGKILL) ...
    assert life.value("killed") == "0" and life.value("child") == "137", life.lines
    # ... and none of the host's: the module's life ran it while a host process lived
    # (checked in `inside`); this host process outlives one more life's kill -9 -1.
    again = live(tmp_path)
    assert again.status == 0 and again.value("child") == "137", again.stderr
    assert host_process.poll() is None


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_the_life_has_no_capabilities(inside: tuple[Life, str, SysV]) -> None:
    life, _, _ = inside
    caps = dict(line.split(":\t") for line in life.values("cap"))
    assert int(caps["CapEff"], 16) == 0 and int(caps["CapPrm"], 16) == 0
    assert int(caps["CapAmb"], 16) == 0


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_the_hostname_is_the_sandboxs(inside: tuple[Life, str, SysV]) -> None:
    life, _, _ = inside
    assert life.value("utsns") != _host_ids()["uts"]  # its own: setting it changes no host's
    assert life.value("hostname") == HOSTNAME != socket.gethostname()  # not the host's name


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_system_v_ipc_is_private(inside: tuple[Life, str, SysV]) -> None:
    life, _, sysv = inside
    assert life.value("ipcns") != _host_ids()["ipc"]
    assert str(sysv.key) not in _keys(life.values("shm")) | _keys(life.values("msg"))
    assert not _keys(life.values("shm")) and not _keys(life.values("msg"))


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_the_terminal_cannot_be_reached(inside: tuple[Life, str, SysV]) -> None:
    life, _, _ = inside
    assert life.value("tty") == "unreachable"
    fields = life.value("stat").rsplit(")", 1)[1].split()
    session, tty_nr = int(fields[3]), int(fields[4])
    assert tty_nr == 0  # no controlling terminal
    assert session != os.getsid(0)


def test_the_terminal_given_to_the_sandbox_is_reachable_outside_it(tmp_path: Path) -> None:
    """The control: the same way of starting a child gives it the terminal."""
    master, slave = pty.openpty()
    try:
        done = subprocess.run(["/bin/sh", "-c", "(exec 3</dev/tty) && echo reachable"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              start_new_session=True, timeout=30, check=False,
                              preexec_fn=_with_terminal(os.ttyname(slave)))
    finally:
        os.close(master)
        os.close(slave)
    assert done.stdout.strip() == "reachable", done.stderr


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_the_guard_refuses_before_any_signal_when_it_sees_no_pid_namespace(
    tmp_path: Path, host_process: subprocess.Popen[bytes]
) -> None:
    """The guard made to see the host's PID namespace (a fake answer): it refuses, and the
    probe never reaches its kill (the life really is isolated: nothing can reach the host)."""
    life = live(tmp_path, fake_inside_pidns=_host_ids()["pid"])
    assert life.status == REFUSED, (life.lines, life.stderr)
    assert life.values("refused") and not life.values("killed") and not life.values("proc")
    assert host_process.poll() is None
