"""The kernel's entry point: its wire (JSON request in, JSON outcome out), its refusals,
and the pinned runner that starts a stored kernel under another package name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine import kernel_store_writer
from reconciler.engine.pinned import PinnedKernel, request_json
from reconciler.kernel.base import errors as kernel_errors
from reconciler.kernel.base import identity
from reconciler.kernel.base.config import (
    ENTRY_OUTCOME_SCHEMA,
    ENTRY_REQUEST_SCHEMA,
    Ceilings,
    Identity,
    LineagePaths,
    ModelConfig,
)
from reconciler.state.kernel_store import KernelStore
from tests.conftest import REPO_ROOT

FINGERPRINT = identity.fingerprint()
ME = Identity("https://example.invalid/ouro.git", "main", "5" * 40, FINGERPRINT)


def _paths(tmp_path: Path) -> LineagePaths:
    base = tmp_path / "l"
    return LineagePaths(base / "x", base / "x.git", base / "x.observations", "lineage-x",
                        "observations/lineage-x")


def _entry(data: bytes) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run([sys.executable, "-E", "-m", "reconciler.kernel"], cwd=REPO_ROOT,
                          input=data, capture_output=True, timeout=60)
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 1, done.stdout  # the outcome, and only it, on stdout
    return done.returncode, json.loads(lines[0]), done.stderr.decode()


def test_describe() -> None:
    status, outcome, _ = _entry(json.dumps({"schema": ENTRY_REQUEST_SCHEMA,
                                            "action": "describe"}).encode())
    assert status == 0 and outcome["schema"] == ENTRY_OUTCOME_SCHEMA and outcome["ok"]
    assert outcome["result"] == {"fingerprint": FINGERPRINT, "package": "reconciler.kernel",
                                 "request_schemas": [ENTRY_REQUEST_SCHEMA]}


GOOD = request_json("generation", paths=LineagePaths(Path("/w"), Path("/g"), Path("/o"),
                                                    "lineage-x", "observations/lineage-x"),
                    identity=ME, model=ModelConfig("echo", "echo"), ceilings=Ceilings())


@pytest.mark.parametrize(("request_", "says"), [
    pytest.param(b"not json", "not JSON", id="not-json"),
    pytest.param(json.dumps({**GOOD, "schema": "ouro-kernel-request/v9"}).encode(),
                 "is not 'ouro-kernel-request/v1'", id="other-schema"),
    pytest.param(json.dumps({**GOOD, "action": "rm"}).encode(), "action 'rm'", id="action"),
    pytest.param(json.dumps({**GOOD, "extra": 1}).encode(), "unknown fields ['extra']",
                 id="unknown-field"),
    pytest.param(json.dumps({**GOOD, "ceilings": {**GOOD["ceilings"], "tasks": "64"}}).encode(),
                 "ceilings.tasks has the wrong type", id="ill-typed-ceiling"),
    pytest.param(json.dumps({**GOOD, "ceilings": {**GOOD["ceilings"], "gpus": 1}}).encode(),
                 "unknown fields ['gpus']", id="unknown-ceiling"),
    pytest.param(json.dumps({**GOOD, "model": {**GOOD["model"], "budget_usd": "-1"}}).encode(),
                 "not negative", id="negative-budget"),
    pytest.param(json.dumps({**GOOD, "model": {**GOOD["model"], "max_output_tokens": True}}
                            ).encode(), "wrong type", id="bool-for-int"),
])
def test_a_bad_request_is_refused_unrun(request_: bytes, says: str) -> None:
    status, outcome, _ = _entry(request_)
    assert status == 0 and not outcome["ok"]
    assert outcome["error"]["kind"] == "request" and says in outcome["error"]["message"]


def test_a_kernel_runs_only_as_itself(tmp_path: Path) -> None:
    other = Identity(ME.repository, ME.ref, ME.commit, "0" * 64)
    request = request_json("birth", paths=_paths(tmp_path), identity=other)
    _, outcome, _ = _entry(json.dumps(request).encode())
    assert outcome["error"]["kind"] == "drift"
    assert outcome["error"]["reason"] == "fingerprint-drift"
    assert not _paths(tmp_path).git_dir.exists()


def test_a_stored_kernel_runs_under_its_own_package_name(tmp_path: Path) -> None:
    store = KernelStore(tmp_path / "store")
    entry = kernel_store_writer.store_running(store, ME)
    pinned = PinnedKernel(store, entry)
    described = pinned.call({"schema": ENTRY_REQUEST_SCHEMA, "action": "describe"})
    assert described["package"] == entry.package != "reconciler.kernel"
    assert described["fingerprint"] == FINGERPRINT
    paths = _paths(tmp_path)
    pinned.birth(paths, ME)  # a real birth, by the stored copy
    assert paths.git_dir.is_dir() and (paths.worktree / ".ouroboros-lineage.json").is_file()
    assert pinned.recover(paths) == "nothing to recover"
    with pytest.raises(kernel_errors.BirthError, match="already exists"):  # its own type
        pinned.birth(paths, ME)
    with pytest.raises(kernel_errors.DriftError) as caught:
        pinned.birth(_paths(tmp_path / "2"), Identity("r", "m", "5" * 40, "1" * 64))
    assert caught.value.reason == "fingerprint-drift"


def test_a_damaged_entry_is_never_started(tmp_path: Path) -> None:
    from reconciler.errors import KernelStoreError

    store = KernelStore(tmp_path / "store")
    entry = kernel_store_writer.store_running(store, ME)
    (entry.package_dir / "transaction").chmod(0o755)
    victim = entry.package_dir / "transaction" / "lineage.py"
    victim.chmod(0o644)
    victim.write_bytes(victim.read_bytes() + b"\nraise SystemExit('tampered')\n")
    with pytest.raises(KernelStoreError, match="is damaged"):
        PinnedKernel(store, entry).birth(_paths(tmp_path), ME)
    assert not _paths(tmp_path).git_dir.exists()


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_a_pinned_generation_is_cancelled_by_signal(tmp_path: Path) -> None:
    import shutil
    import threading
    import time

    from reconciler.kernel.transaction import lineage
    from reconciler.kernel.transaction.generation import GenerationCancelled
    from tests.host import require
    from tests.kernel_generation.helpers import REAL_CEILINGS, git, subjects

    require(shutil.which("bwrap") is not None and shutil.which("emacs") is not None,
            "needs bubblewrap and Emacs")
    store = KernelStore(tmp_path / "store")
    pinned = PinnedKernel(store, kernel_store_writer.store_running(store, ME))
    paths = _paths(tmp_path)
    lineage.init_lineage(paths, ME)
    (paths.worktree / "organism.el").write_text('(sleep-for 60)\n')  # an external edit
    cancel = threading.Event()
    threading.Timer(2.0, cancel.set).start()
    began = time.monotonic()
    with pytest.raises(GenerationCancelled, match="cancelled"):
        pinned.generation(paths=paths, identity=ME, model=ModelConfig("echo", "echo"),
                          ceilings=REAL_CEILINGS, api_key=None, provenance=None,
                          cancel=cancel, ran_with=None)
    assert time.monotonic() - began < 20  # stopped, not waited out
    assert subjects(paths.worktree) == ["seed", "external edit"]  # nothing published
    assert not (paths.git_dir / "ouro-generation.json").exists()
    assert git(paths.worktree, "status", "--porcelain") == ""
