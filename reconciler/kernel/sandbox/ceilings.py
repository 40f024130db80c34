"""Hard ceilings over a generation's whole process tree. Trusted harness.

Rule: no ceiling is ever silently dropped. A backend sets every limit, reads it
back from the place the kernel enforces it (the cgroup's own files), and
refuses with ``CeilingError`` -- before anything of the organism runs -- if any
value differs or a controller is missing.

Backends, tried in this order by ``enforcement: auto``:

- ``systemd``: a transient scope (``systemd-run --scope``; system manager as
  root, user manager otherwise). First because on a systemd host systemd owns
  the cgroup tree and a direct writer would fight it. Only tried when a
  manager is running; limits are read back from the scope's cgroup files,
  because a user manager accepts limits for controllers it was never
  delegated and then ignores them.
- ``cgroup2``: a cgroup made directly under a cgroup2 mount whose root offers
  the cpu, memory and pids controllers.
- ``cgroup1``: one cgroup per hierarchy (cpu, cpuacct, memory, pids).

Every backend starts the child through a gate: ``/bin/sh`` waits on a pipe
(its stdin) until the kernel has put it into the scope and checked that it is
there (and the caller's ``prepare(pid)`` has run: the sandbox sets the life's
resource limits with ``prlimit``), then execs the real command with stdin from
/dev/null. No ``preexec_fn`` (unsafe with threads); a failure before the gate
opens kills the child, which never ran anything.

The wall limit is the sandbox's (a timer that calls ``Scope.kill``); the
systemd backend also sets ``RuntimeMaxSec`` as a backstop.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from ..base.config import ENFORCEMENTS, Ceilings, format_memory
from ..base.errors import CeilingError

CGROUP_MOUNT = Path("/sys/fs/cgroup")
PARENT = "ouro"  # every generation's cgroup lives under <hierarchy>/ouro/
CFS_PERIOD_US = 100_000
# A scope name becomes a directory and a unit name: keep it boring.
_SCOPE_NAME = re.compile(r"\A[a-z0-9][a-z0-9_.-]{0,99}\Z")
_V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids")
_V2_CONTROLLERS = ("cpu", "memory", "pids")
_KILL_PATIENCE_S = 5.0
_GATE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Accounting:
    """What a scope measured; ``None`` where the backend could not tell (never a guess)."""

    cpu_usage_nsec: int | None
    memory_peak_bytes: int | None
    oom_kills: int | None
    result: str | None  # systemd's Result, or the cgroup backends' "oom-kill"|"killed"|"exited"


UNKNOWN = Accounting(None, None, None, None)


class Gate(Protocol):
    """A scope's first process, held at its gate: ``open`` lets it run its command,
    ``abort`` kills it unrun."""

    proc: subprocess.Popen[bytes]

    def open(self) -> None: ...
    def abort(self) -> None: ...


class Scope(Protocol):
    backend: str

    def start(self, argv: list[str], *, prepare: Callable[[int], None] | None = None,
              **popen_kwargs: Any) -> Gate: ...
    def popen(self, argv: list[str], *, prepare: Callable[[int], None] | None = None,
              **popen_kwargs: Any) -> subprocess.Popen[bytes]: ...
    def kill(self) -> None: ...
    def accounting(self) -> Accounting: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class CgroupMounts:
    """Where the cgroup hierarchies are: v1 controller -> mount dir, and the v2 mount."""

    v1: dict[str, Path] = field(default_factory=dict)
    v2: Path | None = None


def discover_mounts(mountinfo: Path = Path("/proc/self/mountinfo")) -> CgroupMounts:
    """Read the cgroup mounts of this host from mountinfo."""
    v1: dict[str, Path] = {}
    v2: Path | None = None
    try:
        lines = mountinfo.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return CgroupMounts()
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        mount = Path(fields[4].replace("\\040", " "))
        if rest[0] == "cgroup2" and v2 is None:
            v2 = mount
        elif rest[0] == "cgroup":
            for option in rest[2].split(","):
                if option in _V1_CONTROLLERS and option not in v1:
                    v1[option] = mount
    return CgroupMounts(v1, v2)


class Unavailable(Exception):
    """A backend cannot run here (internal: auto tries the next one)."""


def validate_scope_name(name: str) -> str:
    if not _SCOPE_NAME.match(name) or ".." in name:
        raise CeilingError(
            f"kernel: scope name {name!r} is not safe "
            "(lowercase letters, digits, '_', '.', '-'; at most 100; no '..')"
        )
    return name


def open_scope(
    ceilings: Ceilings,
    name: str,
    *,
    mounts: CgroupMounts | None = None,
) -> Scope:
    """A scope with every ceiling set and read back, or ``CeilingError`` saying why not.

    ``name`` must be unique per generation (it names the cgroup / unit).
    ``mounts``: where the cgroup hierarchies are (default: this host's).
    """
    validate_scope_name(name)
    if ceilings.enforcement not in ENFORCEMENTS:
        raise CeilingError(f"kernel: unknown ceiling enforcement {ceilings.enforcement!r}")
    _check_values(ceilings)
    found = mounts if mounts is not None else discover_mounts()
    wanted = _BACKEND_ORDER if ceilings.enforcement == "auto" else (ceilings.enforcement,)
    reasons: list[str] = []
    for backend in wanted:
        try:
            return _OPENERS[backend](ceilings, name, found)
        except Unavailable as exc:
            reasons.append(f"{backend}: {exc}")
    raise CeilingError(
        "kernel: cannot put the aggregate resource scope in force; "
        + "; ".join(reasons)
        + ". Run where one backend works (root with writable cgroups, or a systemd manager)."
    )


def _check_values(ceilings: Ceilings) -> None:
    numbers = {
        "wall_seconds": ceilings.wall_seconds,
        "cpu_seconds": ceilings.cpu_seconds,
        "memory_bytes": ceilings.memory_bytes,
        "tasks": ceilings.tasks,
    }
    for key, value in numbers.items():
        if value <= 0:
            raise CeilingError(f"kernel: ceiling {key} must be positive, got {value}")
    if ceilings.swap_bytes < 0:
        raise CeilingError(f"kernel: ceiling swap_bytes must be >= 0, got {ceilings.swap_bytes}")


# ---------------------------------------------------------------- the gate


# The gate reads "go" on its stdin (a pipe from the kernel), then execs the command
# with stdin from /dev/null: a scope's child never gets any other stdin.
_GATE = 'read -r go || exit 125; [ "$go" = go ] || exit 125; exec "$@" </dev/null'


def _gate_argv(argv: Sequence[str]) -> list[str]:
    return ["/bin/sh", "-c", _GATE, "ouro-gate", *argv]


class _Gated:
    """A child that waits at the gate until ``open()``; ``abort()`` kills it unrun."""

    def __init__(
        self,
        argv: Sequence[str],
        popen_kwargs: dict[str, Any],
        wrap: Callable[[list[str]], list[str]] = list,
    ) -> None:
        if popen_kwargs.get("stdin") not in (None, subprocess.DEVNULL):
            raise ValueError("a scope's child always reads /dev/null")
        read_fd, self._write_fd = os.pipe()
        os.set_inheritable(self._write_fd, False)
        kwargs = {**popen_kwargs, "stdin": read_fd}
        try:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                wrap(_gate_argv(argv)), **kwargs
            )
        except BaseException:
            os.close(self._write_fd)
            raise
        finally:
            os.close(read_fd)

    def hold(self, prepare: Callable[[int], None] | None) -> None:
        """``prepare(pid)`` while the child waits, for what must be in place before it runs
        (e.g. ``prlimit``); if ``prepare`` raises, the child is killed unrun and the error
        propagates."""
        if prepare is None:
            return
        try:
            prepare(self.proc.pid)
        except BaseException:
            self.abort()
            raise

    def open(self) -> None:
        """Let the child run its command."""
        try:
            os.write(self._write_fd, b"go\n")
        finally:
            self._close_gate()

    def _close_gate(self) -> None:
        """The gate's pipe, closed once (its number may be another file's afterwards)."""
        fd, self._write_fd = self._write_fd, -1
        if fd >= 0:
            os.close(fd)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self._close_gate()
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):  # nobody will read them
            if stream is not None:
                stream.close()


def _popen_once(scope: _CgroupScope | SystemdScope) -> None:
    if scope.started:
        raise CeilingError("kernel: a scope runs one process tree; open a new scope")
    scope.started = True


# ---------------------------------------------------------------- cgroup files


def _write(path: Path, value: str) -> None:
    """Write a control file that must already exist (never create one)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    except OSError as exc:
        raise Unavailable(f"cannot open {path}: {exc.strerror}") from exc
    try:
        os.write(fd, value.encode())
    except OSError as exc:
        raise Unavailable(f"writing {value!r} to {path} failed: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _keyed(path: Path, key: str) -> int | None:
    """A ``key value`` line of a flat-keyed file (cpu.stat, memory.events, oom_control)."""
    text = _read(path)
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            try:
                return int(parts[1])
            except ValueError:
                return None
    return None


def _expect(path: Path, want: str, problems: list[str]) -> None:
    got = _read(path)
    if got != want:
        problems.append(f"{path} reads {got!r}, not {want!r}")


# mkdir of a cgroup can fail for a moment (the kernel still tearing down a sibling, memory
# pressure): worth a few quick tries before the generation is refused.
_BUSY_ERRNOS = frozenset({errno.EBUSY, errno.EAGAIN, errno.ENOMEM, errno.EINTR})


def _make_group(path: Path) -> None:
    """mkdir a per-generation cgroup; the kernel fills it with its control files."""
    retrying = Retrying(
        retry=retry_if_exception(lambda e: isinstance(e, OSError) and e.errno in _BUSY_ERRNOS),
        stop=stop_after_attempt(4),
        wait=wait_exponential(multiplier=0.05, max=0.5),
        reraise=True,
    )
    for attempt in retrying:
        with attempt:
            os.mkdir(path, 0o755)


def _pids_of(group: Path) -> list[int]:
    text = _read(group / "cgroup.procs") or ""
    return [int(p) for p in text.split() if p.isdigit()]


def _kill_group(groups: Sequence[Path], kill_file: Path | None = None) -> None:
    """SIGKILL every task until the groups are empty (loops over forks in flight)."""
    if kill_file is not None:
        with contextlib.suppress(Unavailable):
            _write(kill_file, "1")
    deadline = time.monotonic() + _KILL_PATIENCE_S
    while time.monotonic() < deadline:
        pids = {pid for group in groups for pid in _pids_of(group)}
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _remove_group(path: Path) -> None:
    deadline = time.monotonic() + _KILL_PATIENCE_S
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return
            time.sleep(0.01)


class _CgroupScope:
    """Common part of the two direct cgroup backends."""

    backend = ""

    def __init__(self, groups: list[Path]) -> None:
        self.groups = groups
        self.started = False
        self.killed = False
        self._proc: subprocess.Popen[bytes] | None = None

    def _kill_file(self) -> Path | None:
        return None

    def start(self, argv: list[str], *, prepare: Callable[[int], None] | None = None,
              **popen_kwargs: Any) -> _Gated:
        """The scope's one process tree: its first process in every group, held at its
        gate, ``prepare(pid)`` done; it runs ``argv`` once the gate is opened."""
        _popen_once(self)
        gated = _Gated(argv, popen_kwargs)
        pid = gated.proc.pid
        try:
            for group in self.groups:
                _write(group / "cgroup.procs", str(pid))
            problems = [
                f"pid {pid} is not in {group}" for group in self.groups
                if pid not in _pids_of(group)
            ]
            if problems:
                raise Unavailable("; ".join(problems))
        except Unavailable as exc:
            gated.abort()
            raise CeilingError(
                f"kernel: cannot put the generation into its {self.backend} scope: {exc}"
            ) from exc
        gated.hold(prepare)
        self._proc = gated.proc
        return gated

    def popen(self, argv: list[str], *, prepare: Callable[[int], None] | None = None,
              **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        gated = self.start(argv, prepare=prepare, **popen_kwargs)
        gated.open()
        return gated.proc

    def kill(self) -> None:
        self.killed = True
        # The main process first: a sandbox (bwrap --die-with-parent, own pid namespace)
        # then loses its init, and the kernel kills the namespace at once, forks included.
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        _kill_group(self.groups, self._kill_file())

    def close(self) -> None:
        _kill_group(self.groups, self._kill_file())
        for group in self.groups:
            _remove_group(group)

    def _activate(self, ceilings: Ceilings) -> None:
        """Create the groups and put every limit in force, or leave nothing behind."""
        _create_all(self.groups)
        try:
            self._set(ceilings)
        except Unavailable:
            self.close()
            raise

    def _set(self, ceilings: Ceilings) -> None:
        raise NotImplementedError

    def _result(self, oom_kills: int | None) -> str:
        if oom_kills:
            return "oom-kill"
        return "killed" if self.killed else "exited"


def _create_all(groups: list[Path]) -> None:
    made: list[Path] = []
    try:
        for group in groups:
            try:
                _make_group(group)
            except FileExistsError as exc:
                raise Unavailable(f"{group} already exists (scope names must be unique)") from exc
            except OSError as exc:
                raise Unavailable(f"cannot create {group}: {exc.strerror}") from exc
            made.append(group)
    except Unavailable:
        for group in made:
            _remove_group(group)
        raise


# ---------------------------------------------------------------- cgroup v1


class Cgroup1Scope(_CgroupScope):
    backend = "cgroup1"

    def __init__(self, groups: dict[str, Path]) -> None:
        super().__init__(list(dict.fromkeys(groups.values())))
        self.by_controller = groups

    @classmethod
    def open(cls, ceilings: Ceilings, name: str, mounts: CgroupMounts) -> Cgroup1Scope:
        missing = [c for c in _V1_CONTROLLERS if c not in mounts.v1]
        if missing:
            raise Unavailable(f"no cgroup v1 hierarchy for {', '.join(missing)}")
        parents = {c: mounts.v1[c] / PARENT for c in _V1_CONTROLLERS}
        for parent in dict.fromkeys(parents.values()):
            try:
                parent.mkdir(exist_ok=True)
            except OSError as exc:
                raise Unavailable(f"cannot create {parent}: {exc.strerror}") from exc
        groups = {c: parents[c] / name for c in _V1_CONTROLLERS}
        scope = cls(groups)
        scope._activate(ceilings)
        return scope

    def _set(self, ceilings: Ceilings) -> None:
        cpu, memory, pids = (self.by_controller[c] for c in ("cpu", "memory", "pids"))
        quota = CFS_PERIOD_US * ceilings.cpu_quota_percent // 100
        memsw = ceilings.memory_bytes + ceilings.swap_bytes
        wanted = [
            (cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US)),
            (cpu / "cpu.cfs_quota_us", str(quota)),
            (memory / "memory.limit_in_bytes", str(ceilings.memory_bytes)),
            (memory / "memory.memsw.limit_in_bytes", str(memsw)),
            (pids / "pids.max", str(ceilings.tasks)),
        ]
        for path, value in wanted:
            _write(path, value)
        problems: list[str] = []
        for path, value in wanted:
            _expect(path, value, problems)
        if problems:
            raise Unavailable("limits not in force: " + "; ".join(problems))

    def accounting(self) -> Accounting:
        memory = self.by_controller["memory"]
        oom = _keyed(memory / "memory.oom_control", "oom_kill")
        return Accounting(
            cpu_usage_nsec=_read_int(self.by_controller["cpuacct"] / "cpuacct.usage"),
            memory_peak_bytes=_read_int(memory / "memory.max_usage_in_bytes"),
            oom_kills=oom,
            result=self._result(oom),
        )


# ---------------------------------------------------------------- cgroup v2


def _controllers(path: Path) -> set[str]:
    return set((_read(path) or "").split())


class Cgroup2Scope(_CgroupScope):
    backend = "cgroup2"

    def __init__(self, group: Path) -> None:
        super().__init__([group])
        self.group = group

    def _kill_file(self) -> Path | None:
        kill = self.group / "cgroup.kill"
        return kill if kill.exists() else None

    @classmethod
    def open(cls, ceilings: Ceilings, name: str, mounts: CgroupMounts) -> Cgroup2Scope:
        if mounts.v2 is None:
            raise Unavailable("no cgroup2 mount")
        root = mounts.v2
        wanted = set(_V2_CONTROLLERS)
        offered = _controllers(root / "cgroup.controllers")
        if not wanted <= offered:
            raise Unavailable(
                f"{root} offers controllers {sorted(offered) or 'none'}, "
                f"needs {sorted(wanted)}"
            )
        parent = root / PARENT
        enable = " ".join(f"+{c}" for c in _V2_CONTROLLERS)
        try:
            if not wanted <= _controllers(root / "cgroup.subtree_control"):
                _write(root / "cgroup.subtree_control", enable)
            parent.mkdir(exist_ok=True)
            if not wanted <= _controllers(parent / "cgroup.subtree_control"):
                _write(parent / "cgroup.subtree_control", enable)
        except OSError as exc:
            raise Unavailable(f"cannot prepare {parent}: {exc.strerror}") from exc
        scope = cls(parent / name)
        scope._activate(ceilings)
        return scope

    def _set(self, ceilings: Ceilings) -> None:
        quota = CFS_PERIOD_US * ceilings.cpu_quota_percent // 100
        wanted = [
            ("cpu.max", f"{quota} {CFS_PERIOD_US}"),
            ("memory.max", str(ceilings.memory_bytes)),
            ("memory.swap.max", str(ceilings.swap_bytes)),
            ("pids.max", str(ceilings.tasks)),
        ]
        for name, value in wanted:
            _write(self.group / name, value)
        problems: list[str] = []
        for name, value in wanted:
            _expect(self.group / name, value, problems)
        if problems:
            raise Unavailable("limits not in force: " + "; ".join(problems))

    def accounting(self) -> Accounting:
        usage = _keyed(self.group / "cpu.stat", "usage_usec")
        oom = _keyed(self.group / "memory.events", "oom_kill")
        return Accounting(
            cpu_usage_nsec=None if usage is None else usage * 1000,
            memory_peak_bytes=_read_int(self.group / "memory.peak"),
            oom_kills=oom,
            result=self._result(oom),
        )


# ---------------------------------------------------------------- systemd

# Where a running manager leaves its mark (sd_booted(3); the user manager's socket).
SYSTEM_MANAGER_MARK = Path("/run/systemd/system")
_USER_BUS_ENV = ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")


def _user_manager_mark() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return Path(runtime) / "systemd" / "private"


def _systemctl_values(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def _systemd_int(value: str | None) -> int | None:
    """systemctl's numbers; '[not set]' and UINT64_MAX mean unknown."""
    if value is None or not value.isdigit():
        return None
    number = int(value)
    return None if number >= (1 << 64) - 1 else number


class SystemdScope:
    """A transient scope unit made by ``systemd-run --scope``; the child is its main process."""

    backend = "systemd"
    _WAIT_UNIT_S = 5.0

    def __init__(
        self, ceilings: Ceilings, name: str, mounts: CgroupMounts, run: str, ctl: str,
        user: bool, expand_flag: bool,
    ) -> None:
        self.ceilings = ceilings
        self.unit = f"ouro-{name}.scope"
        self.mounts = mounts
        self.run, self.ctl = run, ctl
        self.manager = ["--user"] if user else []
        self.expand_flag = expand_flag
        self.started = False
        self.killed = False
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def open(cls, ceilings: Ceilings, name: str, mounts: CgroupMounts) -> SystemdScope:
        run, ctl = shutil.which("systemd-run"), shutil.which("systemctl")
        if run is None or ctl is None:
            raise Unavailable("systemd-run or systemctl is not installed")
        user = os.geteuid() != 0
        mark = _user_manager_mark() if user else SYSTEM_MANAGER_MARK
        if not mark.exists():
            raise Unavailable(f"no systemd {'user ' if user else ''}manager runs ({mark} missing)")
        helptext = subprocess.run(
            [run, "--help"], capture_output=True, stdin=subprocess.DEVNULL, check=False,
            start_new_session=True,  # like every child: out of the terminal's Ctrl-C
        ).stdout
        return cls(ceilings, name, mounts, run, ctl, user, b"--expand-environment" in helptext)

    def properties(self) -> list[str]:
        c = self.ceilings
        return [
            f"RuntimeMaxSec={c.wall_seconds}",
            f"CPUQuota={c.cpu_quota_percent}%",
            f"MemoryMax={format_memory(c.memory_bytes)}",
            f"MemorySwapMax={format_memory(c.swap_bytes)}",
            f"TasksMax={c.tasks}",
        ]

    def run_argv(self, argv: Sequence[str]) -> list[str]:
        head = [self.run, *self.manager, "--scope", "--quiet", f"--unit={self.unit}"]
        if self.expand_flag:
            head.append("--expand-environment=no")
        for prop in self.properties():
            head += ["-p", prop]
        return [*head, "--", *argv]

    def _show(self, *props: str) -> dict[str, str]:
        done = subprocess.run(
            [self.ctl, *self.manager, "show", self.unit, "-p", ",".join(props)],
            capture_output=True, stdin=subprocess.DEVNULL, check=False, start_new_session=True,
        )
        return _systemctl_values(done.stdout.decode("utf-8", "replace"))

    def start(self, argv: list[str], *, prepare: Callable[[int], None] | None = None,
              **popen_kwargs: Any) -> _Gated:
        """The unit's one process tree, held at its gate, ``prepare(pid)`` done (a
        failure closes the scope); it runs ``argv`` once the gate is opened."""
        _popen_once(self)
        # systemd-run --scope execs its command: the gate is the unit's main process.
        # A user manager is found through these two variables; bwrap's --clearenv keeps
        # them (like everything else) out of the sandbox.
        env = popen_kwargs.get("env")
        if self.manager and env is not None:
            found = {k: os.environ[k] for k in _USER_BUS_ENV if k in os.environ}
            popen_kwargs = {**popen_kwargs, "env": {**env, **found}}
        gated = _Gated(argv, popen_kwargs, wrap=self.run_argv)
        try:
            self._verify(gated.proc)
            gated.hold(prepare)
        except BaseException:
            gated.abort()
            self.close()
            raise
        self._proc = gated.proc
        return gated

    def popen(self, argv: list[str], *, prepare: Callable[[int], None] | None = None,
              **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        gated = self.start(argv, prepare=prepare, **popen_kwargs)
        try:
            gated.open()
        except BaseException:
            self.close()
            raise
        return gated.proc

    def _verify(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self._WAIT_UNIT_S
        values: dict[str, str] = {}
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise CeilingError(
                    f"kernel: cannot create the aggregate resource scope {self.unit}: "
                    f"systemd-run exited {proc.returncode}"
                )
            values = self._show("ActiveState", "ControlGroup", "MemoryMax", "TasksMax")
            if values.get("ActiveState") == "active" and values.get("ControlGroup"):
                break
            time.sleep(0.01)
        else:
            raise CeilingError(
                f"kernel: the aggregate resource scope {self.unit} never became active "
                f"({values.get('ActiveState')!r})"
            )
        c = self.ceilings
        problems: list[str] = []
        if values.get("MemoryMax") != str(c.memory_bytes):
            problems.append(f"MemoryMax={values.get('MemoryMax')}")
        if values.get("TasksMax") != str(c.tasks):
            problems.append(f"TasksMax={values.get('TasksMax')}")
        problems += self._cgroup_problems(values["ControlGroup"])
        if problems:
            raise CeilingError(
                f"kernel: systemd accepted but does not enforce the ceilings of {self.unit}: "
                + "; ".join(problems)
                + " (are the cpu, memory and pids controllers delegated to this manager?)"
            )

    def _cgroup_problems(self, control_group: str) -> list[str]:
        """Read the limits back from the scope's own cgroup files."""
        c = self.ceilings
        relative = control_group.lstrip("/")
        quota = CFS_PERIOD_US * c.cpu_quota_percent // 100
        problems: list[str] = []
        if self.mounts.v2 is not None and (self.mounts.v2 / relative).is_dir():
            group = self.mounts.v2 / relative
            _expect(group / "cpu.max", f"{quota} {CFS_PERIOD_US}", problems)
            _expect(group / "memory.max", str(c.memory_bytes), problems)
            _expect(group / "memory.swap.max", str(c.swap_bytes), problems)
            _expect(group / "pids.max", str(c.tasks), problems)
            return problems
        if all(k in self.mounts.v1 for k in ("cpu", "memory", "pids")):
            v1 = {k: self.mounts.v1[k] / relative for k in ("cpu", "memory", "pids")}
            period = _read_int(v1["cpu"] / "cpu.cfs_period_us") or CFS_PERIOD_US
            _expect(v1["cpu"] / "cpu.cfs_quota_us",
                    str(period * c.cpu_quota_percent // 100), problems)
            _expect(v1["memory"] / "memory.limit_in_bytes", str(c.memory_bytes), problems)
            _expect(v1["memory"] / "memory.memsw.limit_in_bytes",
                    str(c.memory_bytes + c.swap_bytes), problems)
            _expect(v1["pids"] / "pids.max", str(c.tasks), problems)
            return problems
        return [f"cgroup {control_group} not found under any cgroup mount"]

    def kill(self) -> None:
        self.killed = True
        subprocess.run(
            [self.ctl, *self.manager, "kill", "--signal=SIGKILL", self.unit],
            capture_output=True, stdin=subprocess.DEVNULL, check=False, start_new_session=True,
        )
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    def accounting(self) -> Accounting:
        # Read after the main process ended: if systemd already collected the scope,
        # every number is unknown (None), never a guess.
        values = self._show("CPUUsageNSec", "MemoryPeak", "OOMKills", "Result")
        return Accounting(
            cpu_usage_nsec=_systemd_int(values.get("CPUUsageNSec")),
            memory_peak_bytes=_systemd_int(values.get("MemoryPeak")),
            oom_kills=_systemd_int(values.get("OOMKills")),
            result=values.get("Result") or None,
        )

    def close(self) -> None:
        for verb in ("stop", "reset-failed"):
            subprocess.run(
                [self.ctl, *self.manager, verb, self.unit],
                capture_output=True, stdin=subprocess.DEVNULL, check=False,
                start_new_session=True,
            )


def reap_stale_scopes(prefix: str, *, mounts: CgroupMounts | None = None) -> list[str]:
    """Remove leftover cgroups named ``prefix*`` that hold no task; returns their names.

    A kernel killed mid-generation leaves its (empty) cgroups behind: its sandbox
    dies with it (--die-with-parent), the directories do not. Groups with tasks are
    kept, and so are those of another kernel still alive (named ``.<pid>``): it may not
    have put its sandbox in yet. With a lineage's ``prefix`` (its lock held) this
    process's own leftovers of that lineage go too; an empty ``prefix`` sweeps every
    dead kernel's leftovers and never this process's, whose other lineages may be
    between creating a scope and filling it.
    """
    sweep = not prefix
    if not sweep:
        validate_scope_name(prefix)
    found = mounts if mounts is not None else discover_mounts()
    parents = [m / PARENT for m in dict.fromkeys(found.v1.values())]
    if found.v2 is not None:
        parents.append(found.v2 / PARENT)
    removed: set[str] = set()
    for parent in parents:
        try:
            children = [p for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix)]
        except OSError:
            continue
        for child in children:
            if _pids_of(child) or _owner_alive(child.name, this_process_counts=sweep):
                continue
            try:
                os.rmdir(child)
            except OSError:
                continue
            removed.add(child.name)
    return sorted(removed)


# The sweep of every dead kernel's leftovers (``reap_stale_scopes("")``) walks every
# lineage's groups: done for each generation, a fleet of N lineages pays N^2 walks. A
# kernel killed while this process runs leaves its groups for the next sweep, so once a
# process per this interval is enough (once per apply; a controller now and then).
SWEEP_INTERVAL_S = 300.0
_SWEEP_LOCK = threading.Lock()
_swept_at: list[float] = []  # monotonic time of this process's last sweep


def sweep_stale_scopes_seldom(prefix: str) -> list[str]:
    """``reap_stale_scopes(prefix)``, but the sweep (``prefix`` empty) at most once per
    ``SWEEP_INTERVAL_S`` in this process (physics release 5; before, every generation).
    A lineage's own leftovers (``prefix`` given) are reaped every time."""
    if prefix:
        return reap_stale_scopes(prefix)
    with _SWEEP_LOCK:
        now = time.monotonic()
        if _swept_at and now - _swept_at[-1] < SWEEP_INTERVAL_S:
            return []
        _swept_at[:] = [now]
    return reap_stale_scopes("")


def _owner_alive(name: str, *, this_process_counts: bool) -> bool:
    """Scope names end in ``.<pid>`` of the kernel that made them: a live kernel's scope
    may be empty only because its sandbox has not joined it yet."""
    owner = name.rsplit(".", 1)[-1]
    if not owner.isdigit():
        return False
    if int(owner) == os.getpid():
        return this_process_counts
    try:
        os.kill(int(owner), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


_OPENERS: dict[str, Callable[[Ceilings, str, CgroupMounts], Scope]] = {
    "systemd": SystemdScope.open,
    "cgroup2": Cgroup2Scope.open,
    "cgroup1": Cgroup1Scope.open,
}
_BACKEND_ORDER = ("systemd", "cgroup2", "cgroup1")
