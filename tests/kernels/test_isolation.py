"""Stored kernels run isolated: an entry holds exactly its fingerprinted files (anything
beside them is ``kernel-damaged``), and a stored kernel and its broker import nothing from
the entry's folder or their working directory but the kernel's own package."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.engine import kernel_store_writer
from reconciler.engine.pinned import PinnedKernel
from reconciler.errors import KernelStoreError
from reconciler.kernel.base import identity
from reconciler.kernel.base.config import (
    ENTRY_REQUEST_SCHEMA,
    Identity,
    LineagePaths,
)
from reconciler.state import kernel_store
from reconciler.state.kernel_store import KernelStore, StoredKernel
from tests.inprocess import ouro
from tests.kernels.checkout import remove_tree

ME = Identity("https://example.invalid/ouro.git", "main", "5" * 40, identity.fingerprint())
# Imported, it leaves a marker, then behaves as the module it shadows would.
PLANTED = ("import pathlib\n"
           "pathlib.Path({marker!r}).write_text('imported')\n"
           "from importlib import import_module as _i\n")


def _paths(tmp_path: Path) -> LineagePaths:
    base = tmp_path / "l"
    return LineagePaths(base / "x", base / "x.git", base / "x.observations", "lineage-x",
                        "observations/lineage-x")


def _plant(folder: Path, marker: Path, name: str = "json.py") -> Path:
    os.chmod(folder, 0o755)
    planted = folder / name
    planted.write_text(PLANTED.format(marker=str(marker)))
    return planted


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[tuple[KernelStore, StoredKernel]]:
    store = KernelStore(tmp_path / "store")
    yield store, kernel_store_writer.store_running(store, ME)
    remove_tree(store.root)


@pytest.mark.parametrize("name", ["json.py", "ouro_kernel_0000000000000000.py", "notes.txt"])
def test_a_file_beside_a_stored_package_is_kernel_damaged_and_never_imported(
        tmp_path: Path, stored: tuple[KernelStore, StoredKernel], name: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    store, entry = stored
    marker = tmp_path / "marker"
    _plant(entry.path, marker, name)
    with pytest.raises(KernelStoreError, match=f"damaged .*{name} lies beside its package"):
        store.get(entry.fingerprint)
    with pytest.raises(KernelStoreError, match="is damaged"):
        PinnedKernel(store, entry).birth(_paths(tmp_path), ME)
    assert not _paths(tmp_path).git_dir.exists()
    monkeypatch.setenv("OURO_KERNEL_STORE", str(store.root))
    code, out, err = ouro(monkeypatch, capsys, "kernel", "list", "--json")
    assert code == 0, err
    (row,) = json.loads(out)["kernels"]
    assert row["fingerprint"] == entry.fingerprint and "lies beside its package" in row["damaged"]
    facts = kernel_store.gather({"instrument_commit": "6" * 40,
                                  "instrument_fingerprint": entry.fingerprint},
                                 Identity(ME.repository, ME.ref, "7" * 40, "0" * 64),
                                 ENTRY_REQUEST_SCHEMA, store)
    assert facts is not None and facts.damaged and "lies beside" in facts.damaged
    assert not marker.exists()


def test_a_stored_kernel_imports_nothing_beside_it_even_unverified(
        tmp_path: Path, stored: tuple[KernelStore, StoredKernel]) -> None:
    """The second wall: started as ouro starts it, a stored kernel does not import a
    planted module from the entry's folder or the working directory (not even when the
    entry's verification is bypassed, as here)."""
    store, entry = stored
    marker = tmp_path / "marker"
    _plant(entry.path, marker)
    _plant(store.root, marker)  # the working directory a pinned kernel runs in
    child = PinnedKernel._spawn(entry)
    out, _ = child.process.communicate(json.dumps(
        {"schema": ENTRY_REQUEST_SCHEMA, "action": "describe"}).encode(), timeout=60)
    child.stderr.close()
    outcome = json.loads(out)
    assert outcome["ok"] and outcome["result"]["fingerprint"] == entry.fingerprint, outcome
    assert not marker.exists()


def test_a_stored_kernels_broker_imports_nothing_beside_it(
        tmp_path: Path, stored: tuple[KernelStore, StoredKernel]) -> None:
    """The broker a stored kernel starts runs isolated too: a planted ``json.py`` beside the
    package is not imported by it (the broker imports json first thing)."""
    _, entry = stored
    marker = tmp_path / "marker"
    _plant(entry.path, marker)
    sys.path.insert(0, str(entry.path))
    try:
        door = __import__(f"{entry.package}.broker.door", fromlist=["Broker"])
        config = __import__(f"{entry.package}.base.config", fromlist=["ModelConfig"])
        model = config.ModelConfig(provider="echo", name="echo")
        broker = door.Broker.start(
            kernel_dir=tmp_path / "kernel", private_dir=tmp_path / "private", model=model,
            constraints=config.constraints_manifest(config.Ceilings(), model), api_key=None,
            generation=1)
        try:
            assert broker.process.poll() is None
            cwd = Path(os.readlink(f"/proc/{broker.process.pid}/cwd"))
            assert entry.path not in (cwd, *cwd.parents)
            assert b"-I" in Path(f"/proc/{broker.process.pid}/cmdline").read_bytes().split(b"\0")
        finally:
            broker.stop()
    finally:
        sys.path.remove(str(entry.path))
        for name in [m for m in sys.modules if m.startswith(entry.package)]:
            del sys.modules[name]
    assert not marker.exists()
