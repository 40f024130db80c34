"""A staged life (``life.stage``): its first process is put into its scope and given its
limits while the kernel still prepares, held at the scope's gate, and runs nothing until
``run_sandbox`` opens the gate. Real bwrap, Emacs and cgroup v1 groups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base.config import Ceilings
from reconciler.kernel.base.errors import CeilingError
from reconciler.kernel.sandbox import life
from reconciler.kernel.sandbox.ceilings import Accounting, Gate, open_scope
from tests.host import alive
from tests.kernel_sandbox.test_sandbox import (
    CEILINGS,
    SCOPE_SUFFIX,
    files,
    kernel_dir,
    need_real,
    write,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
# what a life sees of its confinement: its environment, its limits, its filter
ORGANISM = (write("env.txt", "process-environment")
            + '(copy-file "/proc/self/limits" "/work/limits")\n'
            + '(copy-file "/proc/self/status" "/work/status")\n')
LIMITS = ("Max open files", "Max msgqueue size", "Max pending signals")


def _scope_name() -> str:
    return f"test-sbx-{uuid.uuid4().hex[:12]}{SCOPE_SUFFIX}"


def _seen(published: dict[str, bytes]) -> dict[str, Any]:
    limits = [line for line in published["limits"].decode().splitlines()
              if line.startswith(LIMITS)]
    seccomp = [line for line in published["status"].decode().splitlines()
               if line.startswith("Seccomp:")]
    return {"env": published["env.txt"], "limits": limits, "seccomp": seccomp}


def _gate_pids(groups: list[Path], timeout: float = 10.0) -> list[int]:
    """The processes in the scope's groups, once the staging thread has put one there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = sorted({int(line) for group in groups
                       for line in (group / "cgroup.procs").read_text().split()})
        if pids:
            return pids
        time.sleep(0.01)
    raise AssertionError("no process entered the staged scope")


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def real() -> Iterator[None]:
    need_real()
    yield


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_a_staged_life_is_the_life_run_sandbox_starts(tmp_path: Path, real: None) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    folder = kernel_dir(tmp_path / "a", ORGANISM)
    staged = life.stage(scope=open_scope(CEILINGS, _scope_name()), kernel_dir=folder,
                        ceilings=CEILINGS)
    result = life.run_sandbox(kernel_dir=folder, ceilings=CEILINGS, scope_name="unused",
                              scope=staged)
    plain = life.run_sandbox(kernel_dir=kernel_dir(tmp_path / "b", ORGANISM),
                             ceilings=CEILINGS, scope_name=_scope_name())
    assert _seen(files(result)) == _seen(files(plain))
    assert _seen(files(result))["seccomp"] == ["Seccomp:\t2"]
    assert result.seccomp_bpf_sha256 == plain.seccomp_bpf_sha256 is not None
    assert result.backend == "cgroup1" and result.accounting.cpu_usage_nsec


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_a_staged_life_never_run_leaves_no_process_group_or_descriptor(
        tmp_path: Path, real: None) -> None:
    before = _open_fds()
    scope = open_scope(CEILINGS, _scope_name())
    groups = list(scope.groups)  # type: ignore[attr-defined]
    staged = life.stage(scope=scope, kernel_dir=kernel_dir(tmp_path, ORGANISM),
                        ceilings=CEILINGS)
    (pid,) = _gate_pids(groups)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[:2] == [b"/bin/sh", b"-c"] and cmdline[3] == b"ouro-gate"  # at its gate
    staged.close()
    staged.close()  # once is all it does
    assert not alive(pid)
    assert not any(group.exists() for group in groups)
    assert _open_fds() == before  # the filter's descriptor too


_KILLED = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from reconciler.kernel.sandbox import life
    from reconciler.kernel.sandbox.ceilings import open_scope
    from tests.kernel_sandbox.test_sandbox import CEILINGS, kernel_dir
    from tests.kernel_sandbox.test_staged import ORGANISM, _gate_pids
    scope = open_scope(CEILINGS, sys.argv[2])
    groups = list(scope.groups)
    life.stage(scope=scope, kernel_dir=kernel_dir(Path(sys.argv[1]), ORGANISM),
               ceilings=CEILINGS)
    print(json.dumps({"gate": _gate_pids(groups), "groups": [str(g) for g in groups]}),
          flush=True)
    time.sleep(600)
""")


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_a_kernel_killed_while_its_life_is_staged_runs_nothing_of_it(
        tmp_path: Path, real: None) -> None:
    kernel = subprocess.Popen([sys.executable, "-c", _KILLED, str(tmp_path), _scope_name()],
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    groups: list[Path] = []
    try:
        assert kernel.stdout is not None
        staged = json.loads(kernel.stdout.readline())
        (gate,) = staged["gate"]
        groups = [Path(g) for g in staged["groups"]]
        kernel.kill()
        kernel.wait()
        seen: set[bytes] = set()
        deadline = time.monotonic() + 10
        while alive(gate) and time.monotonic() < deadline:
            try:
                program = Path(f"/proc/{gate}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                break
            if program:  # (an exiting process's is empty)
                seen.add(program)
        assert not alive(gate)  # its gate's pipe closed: it ends at the gate
        assert seen <= {b"/bin/sh"}  # never the prelude, never bwrap
        assert all((group / "cgroup.procs").read_text() == "" for group in groups)
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        for group in groups:  # (a dead kernel's empty groups: the next sweep's)
            if group.exists():
                group.rmdir()


class _RefusingScope:
    """A scope whose first process cannot be put in: ``start`` raises as a real one does."""

    backend = "fake"

    def __init__(self) -> None:
        self.closed = 0

    def start(self, argv: list[str], *, prepare: Callable[[int], None] | None = None,
              **popen_kwargs: Any) -> Gate:
        raise CeilingError("kernel: cannot put the generation into its fake scope: refused")

    def popen(self, argv: list[str], *, prepare: Callable[[int], None] | None = None,
              **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        raise AssertionError("a staged life is never started again")

    def kill(self) -> None:
        pass

    def accounting(self) -> Accounting:
        raise AssertionError("nothing ran")

    def close(self) -> None:
        self.closed += 1


def test_a_staged_start_that_fails_fails_the_run_and_closes_once(tmp_path: Path) -> None:
    before = _open_fds()
    scope = _RefusingScope()
    folder = kernel_dir(tmp_path, ORGANISM)
    staged = life.stage(scope=scope, kernel_dir=folder, ceilings=CEILINGS)
    with pytest.raises(CeilingError, match="refused"):
        life.run_sandbox(kernel_dir=folder, ceilings=CEILINGS, scope_name="x", scope=staged)
    staged.close()
    assert scope.closed == 1
    assert _open_fds() == before


def test_a_staged_life_runs_only_as_it_was_staged(tmp_path: Path) -> None:
    scope = _RefusingScope()
    folder = kernel_dir(tmp_path, ORGANISM)
    staged = life.stage(scope=scope, kernel_dir=folder, ceilings=CEILINGS)
    other = Ceilings(wall_seconds=21, cpu_seconds=20, memory_bytes=256 << 20, tasks=32,
                     worktree_bytes=4 << 20, tmp_bytes=2 << 20, run_bytes=1 << 20,
                     enforcement="cgroup1")
    for kwargs in ({"ceilings": other}, {"confined": False},
                   {"kernel_dir": tmp_path / "elsewhere"}):
        with pytest.raises(ValueError, match="as it was staged"):
            life.run_sandbox(**{"kernel_dir": folder, "ceilings": CEILINGS, "scope_name": "x",
                                "scope": staged, **kwargs})
    assert scope.closed == 1
