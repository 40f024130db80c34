"""One measurement: a probe's command on one generation's committed tree, sandboxed.

Rule: as strict as a life (``reconciler.kernel.sandbox.life``), from the kernel's own
pieces: the ceilings scope, the confinement prelude, bwrap's arguments (no network,
own user/pid/ipc/uts/cgroup namespaces, no capabilities, read-only root), the
seccomp filter, a fresh session keyring, and (physics release 5) the life's resource
limits; the stage is its owner's alone (folders 0700, files 0600). What differs is
only what is mounted: a stage folder (this runner and a tar of the generation's tree, made from the
lineage's git dir through pygit2, never the worktree) read-only at /kernel, the
probe's files read-only at /probe, and a fresh /work it is unpacked into. No host
path of the lineage, no model socket, no key. stdout is read up to
``output.MAX_OUTPUT`` (beyond, the scope is killed), stderr keeps its last
``STDERR_TAIL`` bytes, recorded as text (``probe_rules.printable_tail``: its last
``probe_rules.STDERR_TAIL`` characters, control characters but newline and tab
replaced), so a failed probe says why in its own words.
"""

from __future__ import annotations

import io
import os
import selectors
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pygit2

from reconciler.kernel.base.config import Ceilings
from reconciler.kernel.sandbox import keyring, life, seccomp_bpf
from reconciler.kernel.sandbox.ceilings import Scope, open_scope
from reconciler.spec.probes import ProbeFiles
from reconciler.state import probe_rules

from . import output

__all__ = ["PROBE_MOUNT", "STDERR_TAIL", "Run", "measure", "probe_argv"]

PROBE_MOUNT = "/probe"
STDERR_TAIL = 4 * probe_rules.STDERR_TAIL  # bytes kept: enough for its last characters
RUNNER = Path(__file__).with_name("runner.sh")
_KILL_GRACE_S = 5.0


@dataclass(frozen=True)
class Run:
    """What one measurement did (``failure`` None: ``metrics`` holds its metrics)."""

    metrics: dict[str, output.Metric] | None
    failure: str | None
    exit_status: int | None
    wall_ms: int
    cpu_ms: int | None
    peak_memory_bytes: int | None
    stderr_tail: str


def probe_ceilings(wall: int, cpu: int, memory: int) -> Ceilings:
    """A life's ceilings but the probe's wall, CPU and memory (the filesystem bounds and
    the tasks are a life's defaults)."""
    return Ceilings(wall_seconds=wall, cpu_seconds=cpu, memory_bytes=memory)


def probe_argv(stage: Path, files: Path, ceilings: Ceilings, seccomp_fd: int,
               command: list[str]) -> list[str]:
    """The life's command line (``kernel.sandbox.life_argv``) with the probe's mounts: the
    stage at /kernel, the probe's files read-only at /probe, and the probe's command."""
    argv = life.life_argv(kernel_dir=stage, ceilings=ceilings, seccomp_fd=seccomp_fd)
    bind = ["--ro-bind", str(stage), life.KERNEL_MOUNT]
    at = next(i for i in range(len(argv)) if argv[i:i + 3] == bind)
    end = len(argv) - 1 - argv[::-1].index("--")
    if argv[end:] != ["--", "/bin/sh", f"{life.KERNEL_MOUNT}/runner.sh"]:
        raise RuntimeError(f"the kernel's life command line changed ({argv[end:]}): "
                           "reconciler/engine/probes/sandbox.py must follow it")
    head = [*argv[:at + 3], "--ro-bind", str(files), PROBE_MOUNT, *argv[at + 3:end]]
    return [*head, "--", "/bin/sh", f"{life.KERNEL_MOUNT}/probe.sh", *command]


def tree_archive(git_dir: Path, commit: str) -> bytes:
    """A tar of ``commit``'s tree, read from the lineage's git dir."""
    repo = pygit2.Repository(str(git_dir))
    found = repo.get(commit)
    if found is None:
        raise KeyError(f"commit {commit} is not in {git_dir}")
    tree = found.peel(pygit2.Tree)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        pending: list[tuple[str, pygit2.Tree]] = [("", tree)]
        while pending:
            prefix, folder = pending.pop()
            for item in folder:
                path = prefix + (item.name or "")
                info = tarfile.TarInfo(path)
                if item.filemode == pygit2.enums.FileMode.TREE:
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                    pending.append((path + "/", repo[item.id].peel(pygit2.Tree)))
                    continue
                if item.filemode == pygit2.enums.FileMode.COMMIT:
                    continue  # a gitlink carries no content
                data = repo[item.id].peel(pygit2.Blob).data
                if item.filemode == pygit2.enums.FileMode.LINK:
                    info.type, info.mode = tarfile.SYMTYPE, 0o777
                    info.linkname = data.decode("utf-8", "surrogateescape")
                    tar.addfile(info)
                    continue
                info.size = len(data)
                info.mode = 0o755 if item.filemode == pygit2.enums.FileMode.BLOB_EXECUTABLE \
                    else 0o644
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """A new file of ``data``, created with ``mode`` (never wider): no moment where
    another user could open it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as sink:
        sink.write(data)
    os.chmod(path, mode)


def _stage(root: Path, archive: bytes, files: ProbeFiles) -> tuple[Path, Path]:
    """The stage and the probe's files under ``root`` (a fresh 0700 folder): folders
    0700, files 0600 (0700 when executable), each created so, so no other user of the
    host reads the generation's tree or the probe's files while it runs. The sandbox
    runs as their owner (bwrap ``--uid``) and reads them as before."""
    stage, probe = root / "stage", root / "files"
    root.chmod(0o700)
    for folder in (stage, probe):
        folder.mkdir(mode=0o700)
    _write_private(stage / "input.tar", archive)
    _write_private(stage / "probe.sh", RUNNER.read_bytes())
    for rel, executable, data in files.entries:
        target = probe / rel
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_private(target, data, 0o700 if executable else 0o600)
    return stage, probe


def measure(*, git_dir: Path, commit: str, command: list[str], files: ProbeFiles,
            ceilings: Ceilings, scope_name: str) -> Run:
    """Measure one generation. Never raises for anything the probe does; ``OSError`` or
    the kernel's ``CeilingError``/``PreflightError`` when the sandbox itself cannot start."""
    archive = tree_archive(git_dir, commit)
    with tempfile.TemporaryDirectory(prefix="ouro-probe-") as temp:
        stage, probe = _stage(Path(temp), archive, files)
        seccomp_fd = seccomp_bpf.filter_fd()
        try:
            argv = probe_argv(stage, probe, ceilings, seccomp_fd, command)
            scope = open_scope(ceilings, scope_name)
            try:
                # The whole run on the thread that spawns it: bwrap's --die-with-parent
                # is the death of that *thread*, which must outlive the sandbox.
                return keyring.in_fresh_session_keyring(
                    lambda: _run(scope, argv, ceilings, seccomp_fd))
            finally:
                scope.close()
        finally:
            os.close(seccomp_fd)


def _start(scope: Scope, argv: list[str], seccomp_fd: int) -> subprocess.Popen[bytes]:
    # A life's resource limits (open files, message-queue bytes 0, pending signals),
    # set on the first process before it runs, from the one home of those numbers
    # (``kernel.base.confinement.RLIMITS``): a probe takes nothing of the host user's.
    return scope.popen(
        argv, prepare=life.bound_resources, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True, pass_fds=(seccomp_fd,), env={"PATH": life.SANDBOX_PATH}, cwd="/",
        start_new_session=True)


def _read(scope: Scope, proc: subprocess.Popen[bytes],
          deadline: float) -> tuple[bytes, bytes, str | None]:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    stopped: str | None = None
    killed_at: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, "out")
        selector.register(proc.stderr, selectors.EVENT_READ, "err")
        while selector.get_map():
            now = time.monotonic()
            if killed_at is None and now >= deadline:
                stopped, killed_at = "timeout", now
                scope.kill()
            if killed_at is not None and now > killed_at + _KILL_GRACE_S:
                break
            for key, _ in selector.select(timeout=max(0.05, min(1.0, deadline - now))):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.data == "err":
                    err += chunk
                    del err[:-STDERR_TAIL]
                elif stopped is None:
                    out += chunk
                    if len(out) > output.MAX_OUTPUT:
                        stopped, killed_at = "overflow", time.monotonic()
                        scope.kill()
    return bytes(out), bytes(err), stopped


def _run(scope: Scope, argv: list[str], ceilings: Ceilings, seccomp_fd: int) -> Run:
    started = time.monotonic()
    deadline = started + ceilings.wall_seconds
    proc = _start(scope, argv, seccomp_fd)
    out, err, stopped = _read(scope, proc, deadline)
    try:
        returncode = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stopped = stopped or "timeout"
        scope.kill()
        returncode = proc.wait()
    wall_ms = int((time.monotonic() - started) * 1000)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    accounting = scope.accounting()
    status = 128 - returncode if returncode < 0 else returncode
    metrics, failure = _verdict(out, status, stopped, ceilings, accounting.oom_kills)
    cpu = accounting.cpu_usage_nsec
    return Run(metrics=metrics, failure=failure, exit_status=None if stopped else status,
               wall_ms=wall_ms, cpu_ms=None if cpu is None else cpu // 1_000_000,
               peak_memory_bytes=accounting.memory_peak_bytes,
               stderr_tail=probe_rules.printable_tail(err))


def _verdict(out: bytes, status: int, stopped: str | None, ceilings: Ceilings,
             oom_kills: int | None) -> tuple[dict[str, output.Metric] | None, str | None]:
    if stopped == "timeout":
        return None, f"timeout: still running after its wall ceiling ({ceilings.wall_seconds}s)"
    if stopped == "overflow":
        return None, f"stdout is longer than {output.MAX_OUTPUT} bytes: stopped"
    if oom_kills:
        return None, "killed at its memory ceiling"
    if status == 125:
        return None, "the generation's tree could not be unpacked into /work"
    if status != 0:
        signal = f" (signal {status - 128})" if 128 < status <= 192 else ""
        return None, f"exit status {status}{signal}"
    return output.parse_metrics(out)
