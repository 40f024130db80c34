"""Physics release 5: a probe runs under a life's bounds, seen from inside the probe --
the allow-list filter (what a life is refused, a probe is refused), the life's resource
limits (one home: ``confinement.RLIMITS``), its own user namespace with the bounded
counts and devpts -- and its stage is its owner's alone while it runs."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from reconciler.engine.probes.sandbox import Run
from reconciler.kernel.base import confinement
from reconciler.spec.probes import ProbeFiles

from .conftest import make_repo, run_probe

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

NOBODY = 65534
INSIDE = """
import ctypes, errno, json, os, resource
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return 0 if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
out = {}
for name in ("RLIMIT_NOFILE", "RLIMIT_MSGQUEUE", "RLIMIT_SIGPENDING"):
    soft, hard = resource.getrlimit(getattr(resource, name))
    out[name + "_soft"], out[name + "_hard"] = soft, hard
status = open("/proc/self/status").read().split("\\n")
out["seccomp"] = [int(l.split()[1]) for l in status if l.startswith("Seccomp:")][0]
out["open_tree_attr"] = call(467, 0, 0, 0, 0, 0)
out["memfd_secret"] = call(447, 0)
out["socketpair_vsock"] = call(53, 40, 1, 0, 0)
out["beyond"] = call(1000, 0)
held = []
while len(held) < 64 and libc.inotify_init1(0) >= 0:
    held.append(1)
out["inotify_instances"] = len(held)
out["devpts"] = "ouro-devpts" in open("/proc/self/mountinfo").read()
print(json.dumps(out))
"""


def test_inside_a_probe_the_filter_and_the_limits_are_a_lifes(tmp_path: Path) -> None:
    (commit,) = make_repo(tmp_path / "x.git")
    run = run_probe(tmp_path / "x.git", commit, ["python3", "-c", INSIDE])
    assert run.failure is None, (run.failure, run.stderr_tail)
    metrics = dict(run.metrics or {})
    limits = {f"{name}_{which}": value for name, value in confinement.RLIMITS
              for which in ("soft", "hard")}
    assert {key: metrics.pop(key) for key in limits} == limits
    assert metrics == {"seccomp": 2, "open_tree_attr": "ENOSYS", "memfd_secret": "ENOSYS",
                       "socketpair_vsock": "EPERM", "beyond": "ENOSYS",
                       "inotify_instances": confinement.LIMITS["inotify_instances"],
                       "devpts": True}


def test_another_user_cannot_read_a_probes_stage_while_it_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage is made where any user can look (a 1777 folder, as /tmp); while the
    probe sleeps, a process of another uid tries to list and read it."""
    require_root()
    (commit,) = make_repo(tmp_path / "x.git")
    shared = Path(tempfile.mkdtemp(prefix="ouro-shared-", dir="/tmp"))
    try:
        shared.chmod(0o1777)
        monkeypatch.setattr(tempfile, "tempdir", str(shared))
        files = ProbeFiles((("secret.txt", False, b"the probe's own\n"),))
        box: dict[str, Run] = {}
        worker = threading.Thread(target=lambda: box.update(run=run_probe(
            tmp_path / "x.git", commit, ["/bin/sh", "-c", "sleep 4; echo '{\"ok\": 1}'"],
            files)))
        worker.start()
        try:
            roots = _wait_for_stage(shared)
            seen = _as_nobody(roots[0])
            modes = {path.relative_to(roots[0]).as_posix(): stat.S_IMODE(path.stat().st_mode)
                     for path in [roots[0], *roots[0].rglob("*")]}
        finally:
            worker.join()
        assert box["run"].metrics == {"ok": 1}
        assert seen == {"list": "PermissionError", "tar": "PermissionError",
                        "secret": "PermissionError"}
        assert modes == {".": 0o700, "stage": 0o700, "files": 0o700,
                         "stage/input.tar": 0o600, "stage/probe.sh": 0o600,
                         "files/secret.txt": 0o600}
    finally:
        subprocess.run(["rm", "-rf", str(shared)], check=False)


def require_root() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to act as another uid")


def _wait_for_stage(shared: Path) -> list[Path]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        roots = [p for p in shared.glob("ouro-probe-*") if (p / "stage" / "probe.sh").exists()]
        if roots:
            return roots
        time.sleep(0.05)
    raise AssertionError("the probe's stage never appeared")


def _as_nobody(root: Path) -> dict[str, str]:
    program = (
        "import json, os, sys\n"
        "root = sys.argv[1]\n"
        "def attempt(action):\n"
        "    try:\n"
        "        action(); return 'read'\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        "print(json.dumps({'list': attempt(lambda: os.listdir(root)),\n"
        "  'tar': attempt(lambda: open(root + '/stage/input.tar', 'rb').read(1)),\n"
        "  'secret': attempt(lambda: open(root + '/files/secret.txt', 'rb').read(1))}))\n")
    done = subprocess.run(["/usr/bin/python3", "-I", "-c", program, str(root)], user=NOBODY,
                          group=NOBODY, extra_groups=[], capture_output=True, text=True,
                          timeout=30, check=True, cwd="/")
    import json

    value: dict[str, str] = json.loads(done.stdout)
    return value
