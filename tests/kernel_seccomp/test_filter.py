"""Physics release 2 in real lives: the seccomp filter (real libseccomp, real bwrap), the
fresh session keyring, and the per-life bounds on host-wide counters.

A try-syscall helper (``try_syscalls.py``, run by Debian's /usr/bin/python3 inside the
life, as Flatpak tests its filter) makes each call raw and reports its errno.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyseccomp
import pytest

from reconciler.kernel.base import confinement, seccomp_filter
from reconciler.kernel.base.config import Ceilings, ModelConfig, constraints_manifest
from reconciler.kernel.base.errors import PreflightError
from reconciler.kernel.broker.door import capabilities
from reconciler.kernel.sandbox import seccomp_bpf
from reconciler.kernel.sandbox.life import bwrap_argv, life_argv, run_sandbox
from tests.host import require
from tests.kernel_sandbox.test_sandbox import files, kernel_dir, need_real

HELPER = Path(__file__).with_name("try_syscalls.py")
PYTHON = "/usr/bin/python3"
CEILINGS = Ceilings(wall_seconds=60, cpu_seconds=60, memory_bytes=512 << 20, tasks=32,
                    worktree_bytes=8 << 20, tmp_bytes=8 << 20, run_bytes=1 << 20,
                    enforcement="cgroup1")
SIGCHLD = 17
SOCK_STREAM, SOCK_RAW = 1, 3
NETLINK_AUDIT = 9
TIOCGWINSZ = 0x5413


def number(name: str) -> int:
    found = pyseccomp.resolve_syscall(pyseccomp.Arch.X86_64, name)
    assert found >= 0, f"{name} is not an x86_64 system call"
    return found


def need_python() -> None:
    need_real()
    require(os.access(PYTHON, os.X_OK), "needs Debian's python3 (visible in the sandbox)")


def life(tmp_path: Path, request: dict[str, Any], *, confined: bool = True,
         ceilings: Ceilings = CEILINGS,
         prepare: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """One life running the helper; its JSON report. ``prepare(kernel folder)`` runs
    before the life starts."""
    organism = (f'(call-process "{PYTHON}" nil (list :file "/work/out.json") nil '
                f'"/work/try_syscalls.py" {json.dumps(json.dumps(request))})\n')
    folder = kernel_dir(tmp_path, organism, {"try_syscalls.py": HELPER.read_bytes()})
    if prepare is not None:
        prepare(folder)
    result = run_sandbox(kernel_dir=folder, ceilings=ceilings, confined=confined,
                         scope_name=f"test-scmp-{uuid.uuid4().hex[:12]}.{os.getpid()}")
    out = files(result)["out.json"]
    report: dict[str, Any] = json.loads(out.decode().splitlines()[0])
    return report


def rule_case(rule: seccomp_filter.Rule) -> list[int]:
    """Arguments that match the rule's condition; without the filter most of these calls
    fail otherwise (EFAULT, EINVAL, ESRCH, ENOTTY, EAFNOSUPPORT) or succeed."""
    if rule.syscall == "clone":
        return [rule.args[0][2] | SIGCHLD, 0, 0, 0, 0]
    if rule.syscall == "ioctl":
        return [0, rule.args[0][3], 0]
    if rule.syscall == "socket":
        family = rule.args[0][3] if rule.args[0][1] == "MASKED_EQ" else rule.args[0][2]
        return [family, SOCK_RAW if family == 16 else SOCK_STREAM,
                NETLINK_AUDIT if family == 16 else 0]
    special = {"ptrace": [0xFFFF, 1, 0, 0], "keyctl": [0, -3, 0], "personality": [8],
               "unshare": [0x10000000], "setns": [-1, 0], "userfaultfd": [0]}
    return special.get(rule.syscall, [0, 0, 0, 0])


DENIED = [(f"{i}:{rule.syscall}:{rule.when}", rule) for i, rule in enumerate(seccomp_filter.RULES)]
ALLOWED = {  # label: (system call, args, what it must return)
    "socket AF_UNIX": ("socket", [1, SOCK_STREAM, 0], 0),
    "socket AF_INET": ("socket", [2, SOCK_STREAM, 0], 0),
    "socket AF_INET6": ("socket", [10, SOCK_STREAM, 0], 0),
    "socket AF_NETLINK route": ("socket", [16, SOCK_RAW, 0], 0),
    "personality PER_LINUX": ("personality", [0], 0),
    "ioctl TIOCGWINSZ": ("ioctl", [0, TIOCGWINSZ, 0], "ENOTTY"),
    "getpid": ("getpid", [], 0),
    "x32 getpid": ("getpid", [], "ENOSYS"),  # the x32 bit below: refused as foreign
}


# ---------------------------------------------------------------- the table


def test_every_rule_names_an_x86_64_call_with_eperm_or_enosys_and_a_reason() -> None:
    for rule in seccomp_filter.RULES:
        number(rule.syscall)
        assert rule.errno in ("EPERM", "ENOSYS")
        assert len(rule.reason) > 10
        assert bool(rule.args) == bool(rule.when), rule
    names = {rule.syscall for rule in seccomp_filter.RULES}
    # the list, each in the table
    assert {"keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter",
            "io_uring_register", "userfaultfd", "perf_event_open", "bpf", "ptrace",
            "process_vm_readv", "process_vm_writev", "kexec_load", "kexec_file_load",
            "mount", "umount2", "fsopen", "unshare", "setns", "clone", "clone3",
            "personality", "socket", "ioctl"} <= names


def test_the_filter_is_disclosed_in_the_manifest_with_its_digest() -> None:
    constraints = constraints_manifest(Ceilings(), ModelConfig("echo", "echo"))
    manifest = capabilities(constraints)
    sandbox = manifest["constraints"]["sandbox"]
    seccomp = sandbox["seccomp"]
    assert seccomp["table_sha256"] == seccomp_filter.table_sha256()
    assert len(seccomp["table_sha256"]) == 64
    assert seccomp["default_action"] == "allow" and seccomp["foreign_architectures"] == "ENOSYS"
    disclosed = {(d["syscall"], d["errno"], d.get("when", "")) for d in seccomp["denied"]}
    for rule in seccomp_filter.RULES:
        if not rule.when.startswith("family == ") or "NETLINK" in rule.when:
            assert (rule.syscall, rule.errno, rule.when) in disclosed
    assert ("socket", "EPERM", "family not in AF_UNIX, AF_INET, AF_INET6, AF_NETLINK") in disclosed
    assert sandbox["session_keyring"] == "new, empty, per life"
    assert sandbox["limits"] == confinement.LIMITS
    json.dumps(manifest)  # plain JSON, as written to /kernel/capabilities.json


def test_the_digest_changes_with_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    before = seccomp_filter.table_sha256()
    seccomp_filter.table_sha256.cache_clear()
    monkeypatch.setattr(seccomp_filter, "RULES", seccomp_filter.RULES[1:])
    try:
        assert seccomp_filter.table_sha256() != before
    finally:
        seccomp_filter.table_sha256.cache_clear()


def test_the_bpf_is_libseccomps_export() -> None:
    program = seccomp_bpf.bpf()
    assert len(program) % 8 == 0 and len(program) > 8 * len(seccomp_filter.RULES) // 2
    # the first instruction loads the architecture (seccomp_data.arch at offset 4)
    assert program[:8] == bytes([0x20, 0, 0, 0, 4, 0, 0, 0])


def test_the_life_argv_puts_the_prelude_before_bwrap(tmp_path: Path) -> None:
    argv = life_argv(kernel_dir=tmp_path, ceilings=Ceilings(), seccomp_fd=7)
    prelude = confinement.prelude_argv()
    assert argv[: len(prelude)] == prelude
    assert os.path.basename(argv[len(prelude)]) == "bwrap"
    assert argv[argv.index("--seccomp") + 1] == "7"
    assert argv[argv.index("--uid") + 1] == str(os.getuid())
    assert argv[argv.index("--gid") + 1] == str(os.getgid())
    at = argv.index("--dev-bind")
    assert argv[at: at + 3] == ["--dev-bind", "/dev/pts", "/dev/pts"]
    assert argv.index("--dev") < at < argv.index("--remount-ro")
    # the plain bwrap argv never binds /dev/pts: only the prelude's own instance is bound
    assert "--dev-bind" not in bwrap_argv(kernel_dir=tmp_path, ceilings=Ceilings())
    assert f"max={confinement.PTYS}" in confinement.PRELUDE


# ---------------------------------------------------------------- real lives


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_every_denied_call_fails_with_its_errno_and_allowed_ones_work(tmp_path: Path) -> None:
    need_python()
    calls: list[list[Any]] = [[label, number(rule.syscall), rule_case(rule)]
                              for label, rule in DENIED]
    for label, (name, args, _) in ALLOWED.items():
        calls.append([label, number(name) | (0x40000000 if label.startswith("x32") else 0),
                      args])
    report = life(tmp_path, {"calls": calls,
                             "probe": ["status", "threads", "spawn", "fork", "i386"]})
    got = report["calls"]
    wrong = {label: (got[label], rule.errno) for label, rule in DENIED
             if got[label] != rule.errno}
    assert wrong == {}
    assert {label: got[label] for label in ALLOWED} == {
        label: want for label, (_, _, want) in ALLOWED.items()}
    assert report["seccomp"] == ["2"]
    assert report["i386"] == "ENOSYS"  # int 0x80 getpid: the foreign ABI is closed whole
    # what Python and glibc need: threads and posix_spawn (clone3 -> ENOSYS -> clone), fork
    assert report["threads"] is True
    assert report["spawn"] == "spawned"
    assert report["fork"] == 7


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_emacs_itself_runs_filtered_and_its_call_process_works(tmp_path: Path) -> None:
    need_real()
    organism = (
        '(with-temp-file "/work/status" (insert-file-contents "/proc/self/status"))\n'
        '(with-temp-file "/work/child" (call-process "/bin/sh" nil t nil "-c" '
        '"echo from-child; grep Seccomp: /proc/self/status"))\n'
        '(with-temp-file "/work/pty" (insert (format "%S" (condition-case e (let ((p '
        '(make-process :name "p" :command (list "/bin/cat") :connection-type (quote pty))))'
        ' (prog1 (process-tty-name p) (delete-process p))) (error e)))))\n'
        # network-interface-list reads the interfaces over netlink (NETLINK_ROUTE)
        '(with-temp-file "/work/ifaces" (insert (format "%S" (condition-case e '
        '(mapcar (function car) (network-interface-list)) (error e)))))\n')
    published = files(run_sandbox(kernel_dir=kernel_dir(tmp_path, organism), ceilings=CEILINGS,
                                  scope_name=f"test-scmp-{uuid.uuid4().hex[:12]}.{os.getpid()}"))
    assert "Seccomp:\t2" in published["status"].decode()
    child = published["child"].decode()
    assert "from-child" in child and "Seccomp:\t2" in child
    assert published["pty"].decode().startswith('"/dev/pts/')  # a pty of the life's own
    assert published["ifaces"].decode().startswith('("lo"')  # the empty namespace's only


# ---------------------------------------------------------------- the keyring


SYS_ADD_KEY, SYS_KEYCTL = 248, 250
SECRET_NAME, SECRET = "ouro-test-secret", "operator-secret-0123456789"


def in_session_with_secret(call: Callable[[], Any]) -> tuple[Any, int]:
    """``call()`` on a thread that joined a new session keyring holding the secret (as
    in a pam_keyinit session); its result and that keyring's id."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            session = libc.syscall(ctypes.c_long(SYS_KEYCTL), ctypes.c_long(1),
                                   b"ouro-test-operator-session")
            assert session > 0, os.strerror(ctypes.get_errno())
            made = libc.syscall(ctypes.c_long(SYS_ADD_KEY), b"user", SECRET_NAME.encode(),
                                SECRET.encode(), ctypes.c_long(len(SECRET)), ctypes.c_long(-3))
            assert made > 0, os.strerror(ctypes.get_errno())
            box["session"] = session
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"], box["session"]


def keyring_request(leave: str) -> dict[str, Any]:
    return {"probe": ["keyring"], "find_keys": [SECRET_NAME, "left-by-a"], "leave_key": leave}


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_a_life_cannot_read_the_operators_session_keyring(tmp_path: Path) -> None:
    need_python()
    report, _ = in_session_with_secret(lambda: life(tmp_path, keyring_request("left-by-a")))
    assert report["keyring"] == {"session": "EPERM", SECRET_NAME: "EPERM",
                                 "left-by-a": "EPERM", "left": "EPERM"}


@pytest.fixture
def without_key_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The filter less its keyring rules: the keyring step alone must hold."""
    keys = {"add_key", "keyctl", "request_key"}
    monkeypatch.setattr(seccomp_filter, "RULES",
                        tuple(r for r in seccomp_filter.RULES if r.syscall not in keys))


@pytest.mark.sandbox
@pytest.mark.cgroup
@pytest.mark.usefixtures("without_key_rules")
def test_each_life_gets_a_fresh_empty_session_keyring(tmp_path: Path) -> None:
    need_python()

    def two_lives() -> list[dict[str, Any]]:
        reports = []
        for name in ("a", "b"):  # the second life stands for the next life and for
            (tmp_path / name).mkdir()  # another lineage alike: nothing is shared by both
            reports.append(life(tmp_path / name, keyring_request(f"left-by-{name}"))["keyring"])
        return reports

    (first, second), operator = in_session_with_secret(two_lives)
    for report in (first, second):
        assert isinstance(report["session"], int) and report["session"] != operator
        assert report[SECRET_NAME] == "ENOKEY"  # the operator's key is not there
        assert isinstance(report["left"], int)  # the life could add a key (filter relaxed)
    assert first["session"] != second["session"]
    assert second["left-by-a"] == "ENOKEY"  # the key the first life left is gone
    assert first["left-by-a"] == "ENOKEY"  # (searched before it was added)


# ---------------------------------------------------------------- host-wide counters


def inotify_ok() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    if fd < 0:
        return False
    os.close(fd)
    return True


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_a_life_exhausts_its_own_counters_never_the_hosts(tmp_path: Path) -> None:
    """The helper takes ptys, inotify instances and files until refused (at most a
    little beyond each bound, so that a missing bound shows without starving the host),
    then holds them and says so through a socket in /kernel; the host allocates each
    while the life holds its own."""
    need_python()
    limits = confinement.LIMITS
    caps = {"ptys": limits["ptys"] + 16, "inotify": limits["inotify_instances"] + 16,
            "files": limits["open_files"] + 64}
    request = {"probe": ["ptys", "inotify", "nofile", "rlimits"], "caps": caps,
               "notify": "/kernel/probe.sock"}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.settimeout(60)
    box: dict[str, Any] = {}
    listening = threading.Event()

    def listen(folder: Path) -> None:
        server.bind(str(folder / "probe.sock"))
        server.listen(1)
        listening.set()

    worker = threading.Thread(
        target=lambda: box.update(report=life(tmp_path, request, prepare=listen)))
    worker.start()
    try:
        assert listening.wait(60)
        door, _ = server.accept()
        with door:
            assert door.recv(16) == b"holding\n"
            host = {"inotify": inotify_ok(), "pty": False}  # the life holds all it could
            primary, secondary = os.openpty()
            host["pty"] = True
            os.close(primary)
            os.close(secondary)
            door.sendall(b"done\n")
    finally:
        server.close()
        worker.join()
    report = box["report"]
    assert host == {"inotify": True, "pty": True}
    assert report["ptys"] == [limits["ptys"], "ENOSPC"]
    assert report["inotify"] == [limits["inotify_instances"], "EMFILE"]
    assert report["nofile"] == [limits["open_files"], limits["open_files"]]
    assert report["nofile_raise"] in ("ValueError", "PermissionError")
    assert report["rlimits"] == {
        "RLIMIT_MSGQUEUE": [limits["message_queue_bytes"]] * 2,
        "RLIMIT_SIGPENDING": [limits["pending_signals"]] * 2}
    assert report["mq_open"] == "EMFILE"  # no message-queue bytes of the host's to take
    opened, error = report["files"]
    assert error == "EMFILE" and limits["open_files"] - 16 < opened < limits["open_files"]


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_inotify_watches_are_bounded(tmp_path: Path) -> None:
    need_python()
    limit = confinement.LIMITS["inotify_watches"]
    report = life(tmp_path, {"probe": ["watches"], "caps": {"watches": limit + 64}})
    assert report["watches"] == [limit, "ENOSPC"]


def test_errno_names_are_linuxs() -> None:
    assert errno.errorcode[errno.EPERM] == "EPERM" and errno.errorcode[errno.ENOSYS] == "ENOSYS"


@pytest.mark.sandbox
def test_a_non_root_operator_gets_the_same_confinement_and_keeps_its_uid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The prelude and bwrap as an unprivileged user (nobody, through setpriv): the life
    keeps that uid (bwrap --uid), is filtered and has its own bounded devpts."""
    need_real()
    require(shutil.which("setpriv") is not None, "needs util-linux's setpriv")
    nobody = 65534
    folder = Path(tempfile.mkdtemp(prefix="ouro-scmp-"))
    try:
        folder.chmod(0o755)
        monkeypatch.setattr(os, "getuid", lambda: nobody)
        monkeypatch.setattr(os, "getgid", lambda: nobody)
        seccomp_fd = seccomp_bpf.filter_fd()
        try:
            argv = life_argv(kernel_dir=folder, ceilings=CEILINGS, seccomp_fd=seccomp_fd)
            monkeypatch.undo()
            argv = [*argv[: argv.index("--") + 1], "/bin/sh", "-c",
                    "id -u; id -g; grep Seccomp: /proc/self/status; "
                    "grep ' /dev/pts ' /proc/self/mountinfo | tail -1"]
            done = subprocess.run(
                ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", *argv],
                pass_fds=(seccomp_fd,), capture_output=True, text=True, timeout=60,
                env={"PATH": "/usr/bin:/bin"}, check=False)
        finally:
            os.close(seccomp_fd)
    finally:
        shutil.rmtree(folder)
    require(not ("unshare" in done.stderr and "Operation not permitted" in done.stderr),
            "needs unprivileged user namespaces")
    assert done.returncode == 0, done.stderr
    uid, gid, seccomp, pts = done.stdout.splitlines()
    assert (uid, gid) == (str(nobody), str(nobody))
    assert seccomp.split() == ["Seccomp:", "2"]
    assert f"max={confinement.PTYS}" in pts and "ouro-devpts" in pts


def test_a_filter_that_cannot_be_built_is_a_preflight_error_and_the_scope_is_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Scope:
        backend, closed = "fake", False

        def popen(self, argv: list[str], **kwargs: Any) -> Any:
            raise AssertionError("no life starts without its filter")

        def close(self) -> None:
            self.closed = True

    def broken() -> int:
        raise OSError("libseccomp.so.2: cannot open shared object file")

    monkeypatch.setattr(seccomp_bpf, "filter_fd", broken)
    scope = Scope()
    (tmp_path / "kernel").mkdir()
    with pytest.raises(PreflightError, match=r"cannot build the seccomp filter.*libseccomp2"):
        run_sandbox(kernel_dir=tmp_path / "kernel", ceilings=CEILINGS, scope_name="x",
                    scope=scope)  # type: ignore[arg-type]
    assert scope.closed


def test_a_missing_prelude_program_is_a_preflight_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confinement, "UNSHARE", str(tmp_path / "no-unshare"))
    (tmp_path / "kernel").mkdir()
    with pytest.raises(PreflightError, match="no-unshare not found; install Debian's util"):
        run_sandbox(kernel_dir=tmp_path / "kernel", ceilings=CEILINGS, scope_name="x")
