"""The sandbox one life runs in: bubblewrap inside a ceilings scope. Trusted harness.

Rule: the organism sees exactly docs/lineage-contract.md "Inside a generation" and nothing
else -- a fresh size-limited /work, bounded /tmp and /run, read-only /usr
(plus /etc/alternatives, so Debian's /usr/bin/emacs resolves), the kernel
folder read-only at /kernel, a read-only root, a read-only /dev holding only
bwrap's device nodes (null, zero, full, random, urandom, tty; /dev/shm is a
read-only folder, /dev/pts a private devpts), HOME and PATH only, no IP network, its own
user/pid/ipc/uts/cgroup namespaces, no capabilities, no terminal (its own session,
outside the terminal's process group), no inherited descriptors. No host path of
the lineage, no git dir, no secret is in the argument list or the environment: the
bwrap process itself gets an empty environment apart from PATH.

The wall limit is a deadline here: when it passes (or ``cancel`` is set) the
whole scope is killed. The exit status is the sandboxed process's own: bwrap
propagates it, and reports a command killed by signal N as 128+N (shell
convention; the runner, a shell, does the same for Emacs), so a status in
129..192 is read as that signal -- an organism calling ``(kill-emacs 130)`` is
indistinguishable from one killed by SIGINT, by construction of the shell.

Physics release 2 adds (``confinement``; docs/contract.md "Physics release 2"):
a seccomp filter (``seccomp_filter``, built by ``seccomp_bpf``; ``--seccomp``), a
fresh empty session keyring (``keyring``), the life's own user namespace around
bwrap's with bounded per-namespace counts and its own devpts (the prelude), and
resource limits set with prlimit while the life waits at its scope's gate, and a
hostname of its own (``HOSTNAME``) instead of a copy of the host's.

Output is bounded: stdout (the result archive) up to ``archive_limit()`` --
beyond it the archive is dropped whole (``archive_overflow``), never cut,
so a truncated tar can never pass for a smaller tree -- and stderr keeps its
last ``STDERR_LIMIT`` bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import selectors
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import confinement
from ..base.config import Ceilings
from ..base.errors import PreflightError
from . import keyring, seccomp_bpf
from .ceilings import Accounting, Scope, open_scope

RUNNER = Path(__file__).with_name("runner.sh")
KERNEL_MOUNT = "/kernel"
WORK = "/work"
# The life's own UTS namespace gets this name, not a copy of the host's: a host's name
# is neither the organism's business nor the same on every host (physics release 2).
HOSTNAME = "ouroboros"
SANDBOX_PATH = "/usr/bin:/bin"
# Top-level host directories that are symlinks into /usr on a merged-/usr host.
USR_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
# Host /etc is not mounted; only what /usr/bin/emacs needs to resolve on Debian.
ETC_BINDS = ("/etc/alternatives",)
STDERR_LIMIT = 1 << 20  # keep the last MiB of the organism's stderr
# How often `cancel` is looked at while the organism runs: a stop reaches a life within
# a quarter of a second, and a lineage waiting 30 s on its model wakes 120 times, not
# 600 (each wake-up is CPU of ouro's, times the lineages running).
_POLL_S = 0.25
_SIGNAL_RANGE = range(129, 128 + 65)
_KILL_GRACE_S = 5.0


@dataclass(frozen=True)
class SandboxResult:
    exit_status: int  # shell convention: 128+signal when killed by a signal
    signal: int | None
    wall_timeout: bool
    archive: bytes  # the runner's stdout (a tar of /work); only meaningful on exit 0
    stderr: bytes  # its last STDERR_LIMIT bytes
    accounting: Accounting
    backend: str
    duration_ms: int
    archive_overflow: bool = False  # stdout exceeded archive_limit(): archive is b""
    cancelled: bool = False
    seccomp_bpf_sha256: str | None = None  # the filter the life ran under (None: none)


def archive_limit(ceilings: Ceilings) -> int:
    """Most bytes a tar of a /work within the ceilings can take (headers and padding)."""
    per_entry = 3 * 512 + 511  # header, GNU long-name header and block, data padding
    return ceilings.worktree_bytes + (2 * ceilings.worktree_files + 64) * per_entry + 20480


def _bwrap() -> str:
    return shutil.which("bwrap") or "/usr/bin/bwrap"


def _usr_links() -> list[str]:
    args: list[str] = []
    for path in USR_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def bwrap_argv(
    *, kernel_dir: Path, ceilings: Ceilings, seccomp_fd: int | None = None,
    own_devpts: bool = False, ids: tuple[int, int] | None = None,
) -> list[str]:
    """bwrap's command line for one life, runner included.

    ``seccomp_fd``: a descriptor holding the filter's BPF (``--seccomp``).
    ``own_devpts``: bind the life's own devpts instance, which ``confinement.PRELUDE``
    mounted at /dev/pts in the life's own mount namespace, over bwrap's -- only ever
    together with that prelude (``life_argv``): without it, /dev/pts is the host's.
    ``ids``: the uid and gid the life has (``--uid``/``--gid``).
    """
    args = [_bwrap(), "--clearenv", "--setenv", "HOME", WORK, "--setenv", "PATH", SANDBOX_PATH]
    args += ["--ro-bind", "/usr", "/usr", *_usr_links()]
    for path in ETC_BINDS:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    for size, mount in (
        (ceilings.worktree_bytes, WORK),
        (ceilings.tmp_bytes, "/tmp"),
        (ceilings.run_bytes, "/run"),
    ):
        args += ["--size", str(size), "--tmpfs", mount]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if own_devpts:
        args += ["--dev-bind", "/dev/pts", "/dev/pts"]
    args += ["--ro-bind", str(kernel_dir), KERNEL_MOUNT]
    # bwrap's own root and its /dev are unbounded tmpfs: once every mount point and device
    # node exists, make both read-only, so /work, /tmp and /run are the only (bounded)
    # places to write (device nodes stay writable: /dev/null is a device, not a file).
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    args += [
        "--unshare-user", "--disable-userns", "--unshare-net", "--unshare-pid",
        "--unshare-ipc", "--unshare-uts", "--hostname", HOSTNAME, "--unshare-cgroup",
        "--cap-drop", "ALL", "--die-with-parent", "--new-session",
        "--chdir", WORK,
    ]
    if ids is not None:
        args += ["--uid", str(ids[0]), "--gid", str(ids[1])]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return [*args, "--", "/bin/sh", f"{KERNEL_MOUNT}/runner.sh"]


def life_argv(*, kernel_dir: Path, ceilings: Ceilings, seccomp_fd: int) -> list[str]:
    """The complete command line of one life of physics release 2: the confinement
    prelude (own user namespace with bounded counts, own devpts), then bwrap with the
    seccomp filter (the resource limits are set at the scope's gate, ``_start``). bwrap
    runs as uid 0 of the prelude's namespace, so it is told the ids the life had without
    the prelude (ouro's own): an organism sees the same uid and gid under either physics,
    on any host."""
    return [*confinement.prelude_argv(),
            *bwrap_argv(kernel_dir=kernel_dir, ceilings=ceilings, seccomp_fd=seccomp_fd,
                        own_devpts=True, ids=(os.getuid(), os.getgid()))]


def install_runner(kernel_dir: Path) -> None:
    """Put the trusted runner into the kernel folder (byte-exact, read-only)."""
    target = kernel_dir / "runner.sh"
    body = RUNNER.read_bytes()
    if target.is_file() and not target.is_symlink() and target.read_bytes() == body:
        return
    temp = kernel_dir / ".runner.sh.tmp"
    temp.write_bytes(body)
    temp.chmod(0o555)
    os.replace(temp, target)


def _status(returncode: int) -> tuple[int, int | None]:
    if returncode < 0:
        return 128 - returncode, -returncode
    if returncode in _SIGNAL_RANGE:
        return returncode, returncode - 128
    return returncode, None


def run_sandbox(
    *,
    kernel_dir: Path,
    ceilings: Ceilings,
    scope_name: str,
    cancel: threading.Event | None = None,
    scope: Scope | StagedLife | None = None,
    confined: bool = True,
) -> SandboxResult:
    """Run one life. ``CeilingError`` (nothing ran) if the ceilings cannot be put in force,
    ``PreflightError`` if the runner cannot be installed or the sandbox cannot be started.

    ``scope``: an already opened scope to run in (default: ``open_scope(ceilings,
    scope_name)``), or the ``StagedLife`` made in it (``stage``) for this ``kernel_dir``
    and ``ceilings``; it is closed here either way. ``confined``: physics release 2's
    additions (seccomp filter, fresh keyring, bounded counts; ``confinement``); False
    only for the benchmark's comparison in the same run.
    """
    if isinstance(scope, StagedLife):
        if (scope.kernel_dir, scope.ceilings, confined) != (kernel_dir, ceilings, True):
            scope.close()
            raise ValueError("kernel: a staged life runs as it was staged")
        return scope.run(cancel)
    if confined:  # staged and run at once: a confined life has one way to start
        opened = scope if scope is not None else open_scope(ceilings, scope_name)
        return stage(scope=opened, kernel_dir=kernel_dir, ceilings=ceilings).run(cancel)
    _install(kernel_dir)
    scope = scope if scope is not None else open_scope(ceilings, scope_name)
    try:
        argv = bwrap_argv(kernel_dir=kernel_dir, ceilings=ceilings)
        plain: Scope = scope
        return _live(lambda: plain.popen(argv, **_popen_kwargs(None)), plain, ceilings, cancel)
    finally:
        scope.close()


def _check_prelude() -> None:
    """The prelude's programs exist (util-linux's unshare, mount): a missing one is a
    refusal before the life, never a death of the organism."""
    missing = [name for name in (confinement.UNSHARE, "mount")
               if shutil.which(name, path=SANDBOX_PATH) is None]
    if missing:
        raise PreflightError(
            f"kernel: cannot confine the life: {', '.join(missing)} not found; install "
            "Debian's util-linux and mount")


def _filter_fd() -> int:
    _check_prelude()
    try:
        return seccomp_bpf.filter_fd()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        raise PreflightError(
            f"kernel: cannot build the seccomp filter: {exc}; install Debian's libseccomp2 "
            "and ouro's dependency pyseccomp (pip install -c constraints.txt -e .)") from exc


def bound_resources(pid: int) -> None:
    """The life's resource limits (``confinement.RLIMITS``), soft and hard, set on its
    first process before it runs: every process of the life inherits them. A probe's
    sandbox sets the same (physics release 5)."""
    for name, value in confinement.RLIMITS:
        resource.prlimit(pid, getattr(resource, name), (value, value))


def _install(kernel_dir: Path) -> None:
    try:
        install_runner(kernel_dir)
    except OSError as exc:
        raise PreflightError(f"kernel: cannot install the runner in {kernel_dir}: {exc}") from exc


def _popen_kwargs(seccomp_fd: int | None) -> dict[str, Any]:
    return {
        "prepare": None if seccomp_fd is None else bound_resources,
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "close_fds": True,
        "pass_fds": () if seccomp_fd is None else (seccomp_fd,),
        "env": {"PATH": SANDBOX_PATH},
        "cwd": "/",
        # Its own session: never in a terminal's foreground process group, so the
        # user's Ctrl-C (SIGINT to that group) reaches ouro, which decides, and never
        # kills a generation into a false death.
        "start_new_session": True,
    }


class StagedLife:
    """A confined life whose first process is started before its generation is ready to
    run: on the keyring's own thread (``keyring.start_in_fresh_session_keyring``) it is
    put into its scope (a cgroup migration waits for an RCU grace period, 5-20 ms here)
    and given its resource limits, then held at the scope's gate while the kernel writes
    the marker, the journal and the input archive; ``run_sandbox(scope=this)`` opens the
    gate. Nothing of the life runs before that: a kernel that dies first closes the
    gate's pipe and the gate exits without running anything (its empty scope is reaped as
    any dead kernel's). ``close`` kills an unopened gate's process, closes the scope and
    the filter's descriptor; the sandbox's own end closes it as ``run_sandbox`` closes a
    scope."""

    def __init__(self, scope: Scope, kernel_dir: Path, ceilings: Ceilings) -> None:
        self.scope, self.kernel_dir, self.ceilings = scope, kernel_dir, ceilings
        self._opened = self._closed = False
        _install(kernel_dir)
        self._fd = _filter_fd()
        try:
            argv = life_argv(kernel_dir=kernel_dir, ceilings=ceilings, seccomp_fd=self._fd)
            kwargs = _popen_kwargs(self._fd)
            self._gate = keyring.start_in_fresh_session_keyring(
                lambda: scope.start(argv, **kwargs), pid_of=lambda gate: gate.proc.pid)
        except BaseException:
            os.close(self._fd)
            raise

    def run(self, cancel: threading.Event | None) -> SandboxResult:
        try:
            result = _live(self._open, self.scope, self.ceilings, cancel)
        finally:
            self.close()
        return dataclasses.replace(result, seccomp_bpf_sha256=seccomp_bpf.bpf_sha256())

    def _open(self) -> subprocess.Popen[bytes]:
        gate = self._gate()  # the scope's or the spawn's failure is raised here
        self._opened = True
        gate.open()
        return gate.proc

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if not self._opened:
                with contextlib.suppress(Exception):  # it failed: nothing to stop
                    self._gate().abort()
            self.scope.close()
        finally:
            os.close(self._fd)


def stage(*, scope: Scope, kernel_dir: Path, ceilings: Ceilings) -> StagedLife:
    """``StagedLife(scope, kernel_dir, ceilings)``; the scope is closed if it cannot be
    staged (``PreflightError``)."""
    try:
        return StagedLife(scope, kernel_dir, ceilings)
    except BaseException:
        scope.close()
        raise


def _live(start: Callable[[], subprocess.Popen[bytes]], scope: Scope, ceilings: Ceilings,
          cancel: threading.Event | None) -> SandboxResult:
    try:
        return _run(scope, start, ceilings, cancel)
    except OSError as exc:  # bwrap or /bin/sh cannot be started: nothing ran
        raise PreflightError(f"kernel: cannot start the sandbox: {exc}") from exc


def _run(
    scope: Scope, start: Callable[[], subprocess.Popen[bytes]], ceilings: Ceilings,
    cancel: threading.Event | None,
) -> SandboxResult:
    limit = archive_limit(ceilings)
    started = time.monotonic()
    deadline = started + ceilings.wall_seconds
    proc = start()
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    overflow = timed_out = cancelled = False
    killed_at: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, "out")
        selector.register(proc.stderr, selectors.EVENT_READ, "err")
        while selector.get_map():
            now = time.monotonic()
            if killed_at is None and cancel is not None and cancel.is_set():
                cancelled, killed_at = True, now
                scope.kill()
            if killed_at is None and now >= deadline:
                timed_out, killed_at = True, now
                scope.kill()
            if killed_at is not None and now > killed_at + _KILL_GRACE_S:
                break  # killed, yet a pipe stays open: stop reading, never hang
            wait = max(0.0, deadline - now)
            if cancel is not None:
                wait = min(wait, _POLL_S)
            for key, _ in selector.select(timeout=wait if wait > 0 else _POLL_S):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                if key.data == "err":
                    err += chunk
                    if len(err) > 2 * STDERR_LIMIT:
                        del err[:-STDERR_LIMIT]
                elif not overflow:
                    out += chunk
                    if len(out) > limit:
                        overflow = True
                        out.clear()
    # Both pipes closed: the pid namespace is gone; wait for bwrap within the deadline.
    try:
        returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        scope.kill()
        returncode = proc.wait()
    duration_ms = int((time.monotonic() - started) * 1000)
    proc.stdout.close()
    proc.stderr.close()
    exit_status, signal_number = _status(returncode)
    return SandboxResult(
        exit_status=exit_status,
        signal=signal_number,
        wall_timeout=timed_out,
        archive=b"" if overflow else bytes(out),
        stderr=bytes(err[-STDERR_LIMIT:]),
        accounting=scope.accounting(),
        backend=scope.backend,
        duration_ms=duration_ms,
        archive_overflow=overflow,
        cancelled=cancelled,
    )
