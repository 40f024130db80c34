"""Helpers for one generation: real lineages (born by the kernel), a fake runtime for
transaction tests, and the real runtime (bwrap, cgroup1, broker) for the DONE criteria."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base.config import Ceilings, Identity, LineagePaths, ModelConfig
from reconciler.kernel.base.identity import fingerprint
from reconciler.kernel.sandbox.ceilings import Accounting
from reconciler.kernel.sandbox.decoder import decode
from reconciler.kernel.sandbox.life import SandboxResult
from reconciler.kernel.transaction import lineage as kernel_lineage
from reconciler.kernel.transaction.generation import Runtime
from tests.host import require

TEST_COMMIT = "5" * 40


def git(cwd: Path, *args: str) -> str:
    """Tests inspect results with git itself."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def subjects(path: Path) -> list[str]:
    return git(path, "log", "--first-parent", "--format=%s").splitlines()[::-1]


def tar_of(files: dict[str, bytes | str]) -> bytes:
    """A result archive as the runner writes it (directories implied)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        made: set[str] = set()
        for name in sorted(files):
            parts = name.split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in made:
                    info = tarfile.TarInfo("./" + directory)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
                    made.add(directory)
            data = files[name]
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo("./" + name)
            info.size = len(raw)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(raw))
    return buffer.getvalue()


@dataclass
class Lineage:
    paths: LineagePaths
    identity: Identity

    @property
    def worktree(self) -> Path:
        return Path(self.paths.worktree)

    @property
    def observations(self) -> Path:
        return Path(self.paths.observations)

    def observation(self, n: int) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(
            git(self.observations, "show", f"HEAD:generations/{n:04d}.json")
        )
        return value

    def organism(self) -> str:
        return (self.worktree / "organism.el").read_text()

    def journal(self) -> str:
        return (self.worktree / "journal.md").read_text()


@pytest.fixture
def identity() -> Identity:
    return Identity("https://example.invalid/ouro.git", "main", TEST_COMMIT, fingerprint())


@pytest.fixture
def born(tmp_path: Path, identity: Identity) -> Lineage:
    """A new lineage, born by the kernel, in three new places under tmp_path."""
    paths = LineagePaths(
        tmp_path / "lin", tmp_path / "lin.git", tmp_path / "lin.observations",
        "lineage-test", "observations/lineage-test",
    )
    kernel_lineage.init_lineage(paths, identity)
    return Lineage(paths, identity)


# ---------------------------------------------------------------- a fake runtime


class FakeScope:
    backend = "fake"

    def __init__(self) -> None:
        self.closed = False

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        raise AssertionError("the fake sandbox never starts a process")

    def kill(self) -> None:
        pass

    def accounting(self) -> Accounting:
        return Accounting(12_000_000, 4_194_304, 0, "exited")

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeBroker:
    calls: list[dict[str, Any]]
    killed: bool = False

    def kill(self) -> None:
        self.killed = True


@dataclass
class Fake:
    """What the next fake generation's sandbox returns, and what it was given."""

    exit_status: int = 0
    files: dict[str, bytes | str] | None = None  # the result tree; None: the input unchanged
    archive: bytes | None = None
    stderr: bytes = b""
    oom_kills: int | None = 0
    result: str | None = "exited"
    wall_timeout: bool = False
    calls: list[dict[str, Any]] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)
    scopes: list[FakeScope] = field(default_factory=list)

    def nothing_ran(self) -> bool:
        """No sandbox ran; a broker, if one was started, was killed again."""
        brokers = [seen["object"] for seen in self.seen if "broker" in seen]
        return not any("input" in seen for seen in self.seen) and all(b.killed for b in brokers)

    def runtime(self) -> Runtime:
        def open_scope(ceilings: Ceilings, name: str) -> FakeScope:
            scope = FakeScope()
            self.scopes.append(scope)
            return scope

        def start_broker(**kwargs: Any) -> FakeBroker:
            broker = FakeBroker(list(self.calls))
            self.seen.append({"broker": kwargs, "object": broker})
            return broker

        def run_sandbox(**kwargs: Any) -> SandboxResult:
            kernel_dir: Path = kwargs["kernel_dir"]
            given = (kernel_dir / "input.tar").read_bytes()
            self.seen.append({"input": given, "journal": (kernel_dir / "journal.md").read_bytes(),
                              "scope_name": kwargs["scope_name"]})
            kwargs["scope"].close()
            if self.archive is not None:
                archive = self.archive
            elif self.exit_status != 0:
                archive = b""
            elif self.files is None:
                archive = given
            else:
                archive = tar_of(self.files)
            signal = self.exit_status - 128 if self.exit_status > 128 else None
            return SandboxResult(
                exit_status=self.exit_status, signal=signal, wall_timeout=self.wall_timeout,
                archive=archive, stderr=self.stderr,
                accounting=Accounting(12_000_000, 4_194_304, self.oom_kills, self.result),
                backend="fake", duration_ms=5,
            )

        def read_audit(private_dir: Path) -> list[dict[str, Any]]:
            return list(self.calls)

        def reap_scopes(prefix: str) -> list[str]:
            self.seen.append({"reap": prefix})
            return []

        return Runtime(open_scope, start_broker, run_sandbox, decode, read_audit, reap_scopes)


ECHO = ModelConfig(provider="echo", name="echo")


@pytest.fixture
def fake() -> Fake:
    return Fake()


@pytest.fixture
def run_fake(born: Lineage, fake: Fake) -> Callable[..., Any]:
    from reconciler.kernel.transaction.generation import run_generation

    def run(**overrides: Any) -> Any:
        arguments: dict[str, Any] = {
            "paths": born.paths, "identity": born.identity, "model": ECHO,
            "ceilings": Ceilings(), "api_key": None, "runtime": fake.runtime(),
        }
        arguments.update(overrides)
        return run_generation(**arguments)

    return run


# ---------------------------------------------------------------- the real runtime


def real_host_ready() -> str | None:
    """Why real generations cannot run here, or None."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    if shutil.which("emacs") is None:
        return "emacs is not installed"
    if not os.access("/sys/fs/cgroup/memory", os.W_OK):
        return "cgroup v1 memory hierarchy not writable"
    return None


@pytest.fixture
def real_host() -> None:
    """Real generations need bwrap, emacs and a writable cgroup: under CI their absence
    fails the test (``tests.host.require``), elsewhere it skips."""
    missing = real_host_ready()
    require(missing is None, str(missing))


needs_real_host = pytest.mark.usefixtures("real_host")


def replay_model(folder: Path, replies: list[str]) -> ModelConfig:
    folder.mkdir(parents=True, exist_ok=True)
    for index, body in enumerate(replies, start=1):
        (folder / f"{index:03d}.el").write_text(body)
    return ModelConfig(provider="replay", name="replay-test", replay_dir=folder)


REAL_CEILINGS = Ceilings(wall_seconds=60, cpu_seconds=60, memory_bytes=512 << 20,
                         tasks=64, enforcement="cgroup1")


def seed_text() -> str:
    return kernel_lineage.ORGANISM.read_text()
