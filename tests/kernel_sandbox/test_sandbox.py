"""The sandbox: exact bwrap arguments, and real bwrap + cgroup v1 runs of Emacs organisms."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base.config import Ceilings
from reconciler.kernel.base.errors import PreflightError
from reconciler.kernel.sandbox import life as sandbox
from reconciler.kernel.sandbox.ceilings import discover_mounts
from reconciler.kernel.sandbox.decoder import decode
from reconciler.kernel.sandbox.life import (
    RUNNER,
    STDERR_LIMIT,
    USR_LINKS,
    SandboxResult,
    archive_limit,
    bwrap_argv,
    run_sandbox,
)
from tests.host import require

SECRET = "sk-test-selected-secret-0123456789"
CEILINGS = Ceilings(wall_seconds=20, cpu_seconds=20, memory_bytes=256 << 20, tasks=32,
                    worktree_bytes=4 << 20, tmp_bytes=2 << 20, run_bytes=1 << 20,
                    enforcement="cgroup1")


def pairs(argv: list[str]) -> set[tuple[str, ...]]:
    """Every run of 2 and 3 consecutive arguments, to check options with their values."""
    return {tuple(argv[i : i + n]) for n in (2, 3, 4) for i in range(len(argv) - n + 1)}


# ---------------------------------------------------------------- exact arguments


MUST_HAVE = [
    ("--clearenv",),
    ("--setenv", "HOME", "/work"),
    ("--setenv", "PATH", "/usr/bin:/bin"),
    ("--ro-bind", "/usr", "/usr"),
    ("--ro-bind", "/etc/alternatives", "/etc/alternatives"),
    ("--size", str(256 << 20), "--tmpfs", "/work"),
    ("--size", str(64 << 20), "--tmpfs", "/tmp"),
    ("--size", str(16 << 20), "--tmpfs", "/run"),
    ("--proc", "/proc"),
    ("--dev", "/dev"),
    ("--unshare-net",),
    ("--unshare-pid",),
    ("--unshare-ipc",),
    ("--unshare-uts",),
    ("--unshare-user",),
    ("--unshare-cgroup",),
    ("--disable-userns",),
    ("--cap-drop", "ALL"),
    ("--die-with-parent",),
    ("--new-session",),
    ("--chdir", "/work"),
    ("--remount-ro", "/"),
    ("--remount-ro", "/dev"),
]
MUST_NOT_HAVE = ["--bind", "--dev-bind", "--share-net", "--unshare-all", "--cap-add",
                 "--bind-try", "--ro-bind-try", "--setenv OPENAI_API_KEY", "/home", "/root",
                 "/etc/passwd", "/etc/shadow", "/var", "/sys", "/etc/ssl"]


@pytest.fixture
def argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET + "-a")
    return bwrap_argv(kernel_dir=tmp_path / "kernel", ceilings=Ceilings())


@pytest.mark.parametrize("expected", MUST_HAVE, ids=[" ".join(e) for e in MUST_HAVE])
def test_bwrap_has(argv: list[str], expected: tuple[str, ...]) -> None:
    if len(expected) == 1:
        assert expected[0] in argv
    else:
        assert expected in pairs(argv)


@pytest.mark.parametrize("forbidden", MUST_NOT_HAVE)
def test_bwrap_lacks(argv: list[str], forbidden: str) -> None:
    joined = " ".join(argv)
    if forbidden.startswith("/"):
        assert not any(a == forbidden or a.startswith(forbidden + "/") for a in argv)
    elif " " in forbidden:
        assert forbidden not in joined
    else:
        assert forbidden not in argv


def test_bwrap_kernel_dir_read_only_and_command_last(argv: list[str], tmp_path: Path) -> None:
    assert ("--ro-bind", str(tmp_path / "kernel"), "/kernel") in pairs(argv)
    assert argv[-3:] == ["--", "/bin/sh", "/kernel/runner.sh"]
    assert argv.index("--") == len(argv) - 3
    assert os.path.basename(argv[0]) == "bwrap"


def test_bwrap_carries_no_secret_and_no_host_path_but_kernel_dir(
    argv: list[str], tmp_path: Path
) -> None:
    joined = "\n".join(argv)
    assert SECRET not in joined
    assert "API_KEY" not in joined
    allowed = {"/usr", "/etc/alternatives", "/work", "/tmp", "/run", "/proc", "/dev", "/",
               "/kernel", "/bin/sh", "/kernel/runner.sh", "/usr/bin:/bin", argv[0],
               *(p for p in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
                 if os.path.lexists(p))}
    host_paths = {a for a in argv if a.startswith("/") and a not in allowed}
    assert host_paths == {str(tmp_path / "kernel")}


def test_merged_usr_links_are_symlinks(argv: list[str]) -> None:
    """On this host: each of /bin, /lib, ... is recreated as the link it is, or bound as
    the folder it is, or absent from the sandbox when the host has none."""
    present = 0
    for path in USR_LINKS:
        if os.path.islink(path):
            assert ("--symlink", os.readlink(path), path) in pairs(argv)
            present += 1
        elif os.path.isdir(path):
            assert ("--ro-bind", path, path) in pairs(argv)
            present += 1
        else:
            assert path not in argv
    assert present >= 2  # every Linux host has a /bin and a /lib, linked or not


HOSTS = {
    "merged-usr": {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib",
                   "/lib64": "usr/lib64"},
    "split-usr": {"/bin": None, "/sbin": None, "/lib": None},
}


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_usr_links_follow_the_host_layout(host: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Both layouts, whatever this host's: a link (target) or a folder (None) per path."""
    layout = HOSTS[host]
    real_islink, real_isdir, real_readlink = os.path.islink, os.path.isdir, os.readlink

    def islink(path: Any) -> bool:
        return layout.get(path) is not None if path in USR_LINKS else real_islink(path)

    def isdir(path: Any) -> bool:
        return (path in layout and layout[path] is None) if path in USR_LINKS \
            else real_isdir(path)

    def readlink(path: Any, *args: Any, **kwargs: Any) -> Any:
        target = layout.get(path) if path in USR_LINKS else None
        return target if target is not None else real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(sandbox.os.path, "islink", islink)
    monkeypatch.setattr(sandbox.os.path, "isdir", isdir)
    monkeypatch.setattr(sandbox.os, "readlink", readlink)
    argv = bwrap_argv(kernel_dir=tmp_path / "kernel", ceilings=Ceilings())
    monkeypatch.undo()
    for path in USR_LINKS:
        target = layout.get(path)
        if path not in layout:
            assert path not in argv
        elif target is None:
            assert ("--ro-bind", path, path) in pairs(argv)
            assert not any(a == "--symlink" and argv[i + 2] == path for i, a in enumerate(argv))
        else:
            assert ("--symlink", target, path) in pairs(argv)
            assert ("--ro-bind", path, path) not in pairs(argv)
    # either way the links come after /usr, which they point into
    assert argv.index("/usr") < min(argv.index(p) for p in layout)


# ---------------------------------------------------------------- real runs


def need_real() -> None:
    mounts = discover_mounts()
    require(os.path.exists("/usr/bin/bwrap") and os.path.exists("/usr/bin/emacs"),
            "needs bubblewrap and emacs")
    require("memory" in mounts.v1 and os.access(mounts.v1["memory"], os.W_OK),
            "needs writable cgroup v1")


def kernel_dir(root: Path, organism: str, extra: dict[str, bytes] | None = None) -> Path:
    folder = root / "kernel"
    folder.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in {"organism.el": organism.encode(), **(extra or {})}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    (folder / "input.tar").write_bytes(buffer.getvalue())
    (folder / "journal.md").write_text("## gen 1 — no-change — 2026-01-01T00:00:00Z\n")
    (folder / "capabilities.json").write_text("{}\n")
    return folder


def run(tmp_path: Path, organism: str, ceilings: Ceilings = CEILINGS,
        cancel: threading.Event | None = None, extra: dict[str, bytes] | None = None,
        ) -> SandboxResult:
    return run_sandbox(kernel_dir=kernel_dir(tmp_path, organism, extra), ceilings=ceilings,
                       scope_name=f"test-sbx-{uuid.uuid4().hex[:12]}{SCOPE_SUFFIX}", cancel=cancel)


def files(result: SandboxResult) -> dict[str, bytes]:
    assert result.exit_status == 0, result.stderr.decode(errors="replace")
    return {e.path: e.data for e in decode(result.archive, max_files=100, max_bytes=1 << 22)
            if e.kind == "file"}


def write(name: str, form: str) -> str:
    """Elisp: write the printed value of FORM to /work/NAME."""
    return f'(with-temp-file "/work/{name}" (insert (format "%S" {form})))\n'


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_emacs_runs_and_its_stdout_goes_to_stderr(tmp_path: Path) -> None:
    need_real()
    result = run(tmp_path, '(princ "printed to stdout\\n")\n(message "to stderr")\n'
                 + write("out.txt", '"written"'))
    assert b"printed to stdout" in result.stderr
    assert b"to stderr" in result.stderr
    assert result.backend == "cgroup1"
    assert result.signal is None and not result.wall_timeout
    published = files(result)
    assert published["out.txt"] == b'"written"'
    assert set(published) == {"organism.el", "out.txt"}
    assert result.accounting.cpu_usage_nsec and result.accounting.memory_peak_bytes
    assert result.accounting.oom_kills == 0


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_environment_is_exactly_home_and_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              ) -> None:
    need_real()
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    organism = (
        write("env.txt", "process-environment")
        + '(copy-file "/proc/self/environ" "/work/environ")\n'
        + '(call-process "/bin/sh" nil (list :file "/work/child-env") nil "-c" "env")\n'
    )
    published = files(run(tmp_path, organism))
    assert sorted(published["environ"].split(b"\0")[:-1]) == [b"HOME=/work", b"PATH=/usr/bin:/bin"]
    assert sorted(eval_list(published["env.txt"])) == ["HOME=/work", "PATH=/usr/bin:/bin"]
    assert SECRET.encode() not in published["child-env"]
    assert b"API_KEY" not in published["child-env"]


def eval_list(printed: bytes) -> list[str]:
    text = printed.decode().strip("()")
    return [part.strip('"') for part in text.split('" "')]


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_tcp_to_the_host_is_unreachable(tmp_path: Path) -> None:
    need_real()
    listeners: list[tuple[socket.socket, str, int, str]] = []
    server4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server4.bind(("127.0.0.1", 0))
    server4.listen()
    port4 = server4.getsockname()[1]
    listeners.append((server4, "127.0.0.1", port4, f"http://127.0.0.1:{port4}/"))
    try:
        server6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        server6.bind(("::1", 0))
        server6.listen()
        port6 = server6.getsockname()[1]
        listeners.append((server6, "::1", port6, f"http://[::1]:{port6}/"))
    except OSError:
        pass  # no IPv6 loopback on this host
    organism = ""
    for index, (_, host, port, url) in enumerate(listeners):
        organism += write(
            f"net{index}.txt",
            f'(condition-case err (progn (make-network-process :name "p" :host "{host}" '
            f":service {port}) 'connected) (error err))",
        )
        organism += (
            f'(with-temp-file "/work/curl{index}.txt" (insert (number-to-string '
            f'(call-process "curl" nil nil nil "-sS" "--max-time" "3" "{url}"))))\n'
        )
    try:
        for server, *_ in listeners:
            server.setblocking(False)
        published = files(run(tmp_path, organism))
        for server, *_ in listeners:
            with pytest.raises(BlockingIOError):
                server.accept()  # nobody ever connected
    finally:
        for server, *_ in listeners:
            server.close()
    for index in range(len(listeners)):
        assert b"connected" not in published[f"net{index}.txt"]
        assert b"error" in published[f"net{index}.txt"]
        assert published[f"curl{index}.txt"] == b"7"  # curl: could not connect


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_kernel_usr_and_root_are_read_only(tmp_path: Path) -> None:
    need_real()
    organism = "".join(
        write(f"{label}.txt",
              f'(condition-case err (progn (with-temp-file "{target}" (insert "x")) '
              f"'wrote) (error (car err)))")
        for label, target in (("kernel-new", "/kernel/new"),
                              ("kernel-journal", "/kernel/journal.md"),
                              ("usr", "/usr/pwned"), ("etc", "/etc/alternatives/pwned"),
                              ("root", "/pwned"))
    )
    result = run(tmp_path, organism)
    published = files(result)
    for label in ("kernel-new", "kernel-journal", "usr", "etc", "root"):
        assert published[f"{label}.txt"] != b"wrote", label
    assert not (tmp_path / "kernel" / "new").exists()
    assert (tmp_path / "kernel" / "journal.md").read_text().startswith("## gen 1")


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_work_size_limit_holds(tmp_path: Path) -> None:
    need_real()
    organism = write(
        "big.txt",
        '(condition-case err (progn (with-temp-file "/work/fill" '
        "(insert (make-string (* 8 1024 1024) ?x))) 'fits) "
        '(error (delete-file "/work/fill") (car err)))',
    )
    small = Ceilings(**{**CEILINGS.__dict__, "worktree_bytes": 1 << 20})
    result = run(tmp_path, organism, small)
    published = files(result)
    assert published["big.txt"] != b"fits"
    assert len(published.get("fill", b"")) <= 1 << 20


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_tmp_and_run_are_bounded_tmpfs(tmp_path: Path) -> None:
    need_real()
    organism = "".join(
        write(f"{label}.txt",
              f'(condition-case err (progn (with-temp-file "{target}" '
              f"(insert (make-string (* 4 1024 1024) ?x))) 'fits) (error (car err)))")
        for label, target in (("tmp", "/tmp/fill"), ("run", "/run/fill"))
    )
    published = files(run(tmp_path, organism))
    assert published["tmp.txt"] != b"fits"
    assert published["run.txt"] != b"fits"


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_nonzero_exit_publishes_no_archive(tmp_path: Path) -> None:
    need_real()
    result = run(tmp_path, write("speculative.txt", '"must not appear"') + "(kill-emacs 3)\n")
    assert result.exit_status == 3 and result.signal is None
    assert result.archive == b""


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_lisp_error_is_a_nonzero_exit_with_the_backtrace_on_stderr(tmp_path: Path) -> None:
    need_real()
    result = run(tmp_path, "(car 'not-a-list)\n")
    assert result.exit_status == 255
    assert result.archive == b""
    assert b"wrong-type-argument" in result.stderr


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_death_by_signal_is_128_plus_signal(tmp_path: Path) -> None:
    need_real()
    result = run(tmp_path, "(signal-process (emacs-pid) 'SIGSEGV)\n(sleep-for 5)\n")
    assert (result.exit_status, result.signal) == (139, 11)
    assert result.archive == b""


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_memory_hungry_organism_is_oom_killed(tmp_path: Path) -> None:
    need_real()
    hungry = Ceilings(**{**CEILINGS.__dict__, "memory_bytes": 64 << 20})
    result = run(tmp_path, "(setq big (make-string (* 512 1024 1024) ?x))\n", hungry)
    assert result.exit_status != 0
    assert result.accounting.oom_kills is not None and result.accounting.oom_kills >= 1
    assert result.accounting.result == "oom-kill"
    assert result.archive == b""


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_busy_loop_is_ended_by_the_wall_limit(tmp_path: Path) -> None:
    need_real()
    short = Ceilings(**{**CEILINGS.__dict__, "wall_seconds": 2, "cpu_seconds": 2})
    started = time.monotonic()
    result = run(tmp_path, "(while t)\n", short)
    elapsed = time.monotonic() - started
    assert result.wall_timeout
    assert (result.exit_status, result.signal) == (137, 9)
    assert result.archive == b""
    assert 2.0 <= elapsed < 4.0
    assert 2000 <= result.duration_ms < 4000


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_fork_bomb_is_held_and_cleaned_up(tmp_path: Path) -> None:
    need_real()
    bomb = Ceilings(**{**CEILINGS.__dict__, "wall_seconds": 2, "tasks": 16})
    name = f"test-bomb-{uuid.uuid4().hex[:12]}"
    pids_group = discover_mounts().v1["pids"] / "ouro" / name
    peak: list[int] = [0]
    refused: list[int] = [0]  # pids.events "max N": forks the ceiling refused
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, ValueError, IndexError):
                peak[0] = max(peak[0], int((pids_group / "pids.current").read_text()))
                refused[0] = max(refused[0],
                                 int((pids_group / "pids.events").read_text().split()[1]))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run_sandbox(
            kernel_dir=kernel_dir(tmp_path, '(call-process "/bin/sh" nil nil nil "-c" '
                                  '"b() { b | b & }; b")\n(sleep-for 60)\n'),
            ceilings=bomb, scope_name=name)
    finally:
        stop.set()
        watcher.join()
    assert result.wall_timeout
    assert refused[0] >= 1  # it pressed against the ceiling ...
    assert 0 < peak[0] <= 16  # ... and the ceiling held
    assert not pids_group.exists()


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_cancel_kills_at_once(tmp_path: Path) -> None:
    need_real()
    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    started = time.monotonic()
    result = run(tmp_path, "(while t)\n", cancel=cancel)
    timer.cancel()
    assert time.monotonic() - started < 3.0
    assert result.cancelled and not result.wall_timeout
    assert result.signal == 9 and result.archive == b""


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_no_inherited_file_descriptors(tmp_path: Path) -> None:
    need_real()
    secret = tmp_path / "secret-file"
    secret.write_text(SECRET)
    leaked = os.open(secret, os.O_RDONLY)
    os.set_inheritable(leaked, True)
    try:
        organism = ('(call-process "/bin/sh" nil (list :file "/work/fds") nil "-c" '
                    '"for f in /proc/1/fd/* /proc/self/fd/*; do readlink $f; done")\n')
        published = files(run(tmp_path, organism))
    finally:
        os.close(leaked)
    assert b"secret-file" not in published["fds"]


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_model_socket_in_kernel_dir_is_reachable(tmp_path: Path) -> None:
    """The broker's Unix socket works through the read-only /kernel bind (no network)."""
    need_real()
    folder = kernel_dir(tmp_path, '(call-process "curl" nil (list :file "/work/reply") nil "-sS" '
                        '"--unix-socket" "/kernel/model.sock" "-d" "hello" '
                        '"http://localhost/generate")\n')
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(folder / "model.sock"))
    server.listen()

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                               b"Connection: close\r\n\r\nworld")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        result = run_sandbox(kernel_dir=folder, ceilings=CEILINGS,
                             scope_name=f"test-sock-{uuid.uuid4().hex[:12]}")
    finally:
        server.close()
    assert files(result)["reply"] == b"world"


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_published_tree_round_trips_through_the_decoder(tmp_path: Path) -> None:
    need_real()
    organism = (
        '(make-directory "/work/sub/deep" t)\n'
        '(with-temp-file "/work/sub/deep/x.txt" (insert "deep"))\n'
        '(make-symbolic-link "sub/deep/x.txt" "/work/link")\n'
        '(add-name-to-file "/work/sub/deep/x.txt" "/work/hard")\n'
        '(set-file-modes "/work/sub/deep/x.txt" #o755)\n'
    )
    result = run(tmp_path, organism, extra={"keep.txt": b"kept\n"})
    entries = {e.path: e for e in decode(result.archive, max_files=100, max_bytes=1 << 20)}
    assert entries["keep.txt"].data == b"kept\n"
    assert entries["organism.el"].data.startswith(b"(make-directory")
    assert entries["link"].kind == "symlink" and entries["link"].data == b"sub/deep/x.txt"
    assert entries["hard"].kind == "file" and entries["hard"].data == b"deep"
    assert entries["sub/deep/x.txt"].executable


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_nothing_the_organism_started_outlives_it(tmp_path: Path) -> None:
    """A background writer still appending to /work would make tar's snapshot torn."""
    need_real()
    organism = ('(call-process "/bin/sh" nil 0 nil "-c" '
                '"while :; do echo x >> /work/grow; done")\n(sleep-for 0.3)\n')
    for _ in range(3):
        result = run(tmp_path, organism)
        assert result.exit_status == 0, result.stderr
        grown = files(result)["grow"]
        assert grown and set(grown.split(b"\n")) <= {b"x", b""}
        (tmp_path / "kernel").rename(tmp_path / f"kernel-{uuid.uuid4().hex}")


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_archive_beyond_the_ceilings_is_dropped_not_truncated(tmp_path: Path) -> None:
    need_real()
    few = Ceilings(**{**CEILINGS.__dict__, "worktree_files": 1, "worktree_bytes": 64 << 10})
    assert archive_limit(few) < 1000 * 512  # empty files: tmpfs bytes do not bound them
    result = run(tmp_path, '(dotimes (i 1000) (with-temp-file (format "/work/f%d" i)))\n', few)
    assert result.exit_status == 0
    assert result.archive_overflow and result.archive == b""


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_stderr_keeps_only_its_last_mebibyte(tmp_path: Path) -> None:
    need_real()
    organism = ('(dotimes (i 40000) (message "%s %d" (make-string 80 ?e) i))\n'
                '(message "the very end")\n')
    result = run(tmp_path, organism)
    assert result.exit_status == 0
    assert len(result.stderr) == STDERR_LIMIT
    assert result.stderr.endswith(b"the very end\n")


def test_runner_is_installed_byte_exact(tmp_path: Path) -> None:
    folder = tmp_path / "kernel"
    folder.mkdir()
    (folder / "runner.sh").write_text("echo tampered\n")
    from reconciler.kernel.sandbox.life import install_runner

    install_runner(folder)
    assert (folder / "runner.sh").read_bytes() == RUNNER.read_bytes()


def test_missing_kernel_dir_is_a_preflight_error(tmp_path: Path) -> None:
    with pytest.raises(PreflightError, match="cannot install the runner"):
        run_sandbox(kernel_dir=tmp_path / "absent", ceilings=CEILINGS, scope_name="never")


def test_archive_limit_covers_a_full_worktree() -> None:
    limit = archive_limit(CEILINGS)
    assert limit > CEILINGS.worktree_bytes + CEILINGS.worktree_files * 512


# Scopes end in ".<pid>" like the kernel's own: another kernel's sweep on this host
# keeps them while this process lives, and this check looks at this process's only.
SCOPE_SUFFIX = f".{os.getpid()}"


@pytest.fixture(autouse=True)
def _no_leftover_cgroups() -> Iterator[None]:
    yield
    mounts = discover_mounts()
    for controller in ("memory", "pids"):
        parent = mounts.v1.get(controller)
        if parent is not None and (parent / "ouro").is_dir():
            leftovers = [p.name for p in (parent / "ouro").iterdir() if p.is_dir()
                         and p.name.startswith("test-sbx-") and p.name.endswith(SCOPE_SUFFIX)]
            assert leftovers == []
