"""The kernel store: atomic, read-only, verified entries; git objects, bundles and fetches."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest

from reconciler.engine import kernel_store_writer
from reconciler.engine.bundle import read_bundle
from reconciler.errors import KernelStoreError
from reconciler.kernel.base import identity
from reconciler.kernel.base.config import ENTRY_REQUEST_SCHEMA, Identity
from reconciler.state.kernel_store import (
    KernelStore,
    kernel_tree_files,
    package_name,
    store_root,
)
from tests.host import require
from tests.kernels.checkout import change_kernel, commit, git, make_checkout, remove_tree

RUNNING = identity.read_trusted()
FINGERPRINT = identity.fingerprint_of(RUNNING)
C = "c" * 40


def test_put_writes_a_read_only_verified_entry(tmp_path: Path) -> None:
    store = KernelStore(tmp_path / "store")
    entry = kernel_store_writer.put(store, RUNNING, C)
    assert entry.fingerprint == FINGERPRINT == identity.fingerprint()
    assert entry.commit == C and entry.entry == ENTRY_REQUEST_SCHEMA
    assert entry.package == package_name(FINGERPRINT)
    assert entry.schema == "ouro-kernel-store-entry/v2"
    stored = sorted(p.relative_to(entry.package_dir).as_posix()
                    for p in entry.package_dir.rglob("*") if p.is_file())
    sources = [name for name in stored if "__pycache__" not in name]
    assert sources == sorted(RUNNING) and "base/identity.py" in sources
    bytecode = [name for name in stored if "__pycache__" in name]
    assert len(bytecode) == sum(name.endswith(".py") for name in RUNNING)
    for path in [entry.path, *entry.path.rglob("*")]:
        assert not os.stat(path).st_mode & 0o222, path
    assert store.commit_fingerprint(C) == FINGERPRINT
    assert [name for name in os.listdir(store.root) if name.startswith(".tmp-")] == []
    again = kernel_store_writer.put(store, RUNNING, "d" * 40)  # same physics, another commit
    assert again.path == entry.path and again.commit == C
    assert store.commits() == {C: FINGERPRINT, "d" * 40: FINGERPRINT}


def test_a_commit_record_is_never_replaced(tmp_path: Path) -> None:
    store = KernelStore(tmp_path / "store")
    kernel_store_writer.record_commit(store, C, "1" * 64)
    kernel_store_writer.record_commit(store, C, "2" * 64)
    assert store.commit_fingerprint(C) == "1" * 64


@pytest.mark.parametrize("damage", ["bytes", "extra-file", "missing-file", "entry-json",
                                    "byte-code", "extra-byte-code", "extra-folder",
                                    "extra-in-sub-package", "extra-sub-folder", "link"])
def test_a_damaged_entry_is_refused(tmp_path: Path, damage: str) -> None:
    store = KernelStore(tmp_path / "store")
    entry = kernel_store_writer.put(store, RUNNING, C)
    os.chmod(entry.path, 0o755)
    for folder in [entry.package_dir, *entry.package_dir.rglob("*")]:
        if folder.is_dir():
            os.chmod(folder, 0o755)
    if damage == "bytes":
        victim = entry.package_dir / "sandbox" / "life.py"
        victim.chmod(0o644)
        victim.write_bytes(victim.read_bytes().replace(b"--unshare-net", b"--share-net"))
    elif damage == "extra-file":
        (entry.package_dir / "evil.py").write_text("import os\n")
    elif damage == "missing-file":
        (entry.package_dir / "sandbox" / "decoder.py").unlink()
    elif damage == "extra-in-sub-package":
        (entry.package_dir / "broker" / "json.py").write_text("import os\n")
    elif damage == "extra-sub-folder":
        (entry.package_dir / "base" / "evil").mkdir()
    elif damage == "link":
        (entry.package_dir / "base" / "gitnames.py").unlink()
        (entry.package_dir / "base" / "gitnames.py").symlink_to(tmp_path / "gitnames.py")
        (tmp_path / "gitnames.py").write_bytes(RUNNING["base/gitnames.py"])
    elif damage == "byte-code":
        victim = next((entry.package_dir / "sandbox" / "__pycache__").glob("life.*.pyc"))
        victim.chmod(0o644)
        victim.write_bytes(victim.read_bytes() + b"\0")
    elif damage == "extra-byte-code":
        os.chmod(entry.package_dir / "__pycache__", 0o755)
        (entry.package_dir / "__pycache__" / "evil.cpython-311.pyc").write_bytes(b"x")
    elif damage == "extra-folder":
        (entry.package_dir / "evil").mkdir()
    else:
        (entry.path / "entry.json").chmod(0o644)
        (entry.path / "entry.json").write_text("{}")
    with pytest.raises(KernelStoreError, match="is damaged"):
        store.get(FINGERPRINT)
    with pytest.raises(KernelStoreError, match="is damaged"):  # and never papered over
        kernel_store_writer.put(store, RUNNING, C)
    listed = kernel_store_writer.list_store(store, {})
    assert [row.damaged is not None for row in listed] == [True]


def test_a_read_only_store_is_a_clear_error(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "mounting a read-only filesystem needs root")
    target = tmp_path / "ro"
    target.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)],
                             capture_output=True, text=True)
    require(mounted.returncode == 0, f"cannot mount a tmpfs: {mounted.stderr}")
    try:
        store = KernelStore(target / "kernels")
        with pytest.raises(KernelStoreError) as caught:
            kernel_store_writer.store_running(store, Identity("r", "main", C, FINGERPRINT))
        message = str(caught.value)
        assert "cannot write the kernel store" in message
        assert "Read-only file system" in message and "OURO_KERNEL_STORE" in message
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_the_store_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert store_root(tmp_path) == tmp_path / ".kernels"
    monkeypatch.setenv("OURO_KERNEL_STORE", str(tmp_path / "shared"))
    assert store_root(tmp_path) == tmp_path / "shared"


def test_kernel_trees_from_git_bundles_and_paths(tmp_path: Path) -> None:
    require(shutil.which("git") is not None, "needs git to make repositories and bundles")
    source = make_checkout(tmp_path / "ouro")
    c1 = git(source, "rev-parse", "HEAD")
    change_kernel(source, "C2")
    c2 = commit(source, "C2")
    bundle = tmp_path / "all.bundle"
    git(source, "repack", "-a", "-d", "-q")  # deltas in the pack, as a real history has
    git(source, "bundle", "create", str(bundle), "--all")

    repo = pygit2.init_repository(str(tmp_path / "copy.git"), bare=True)
    read_bundle(bundle, repo)
    original = pygit2.Repository(str(source))
    for commit_id in (c1, c2):
        assert kernel_tree_files(repo, commit_id) == kernel_tree_files(original, commit_id)
    assert identity.fingerprint_of(kernel_tree_files(repo, c1) or {}) == FINGERPRINT
    assert kernel_tree_files(repo, "e" * 40) is None

    store = KernelStore(tmp_path / "store")
    from_bundle = kernel_store_writer.fetch(store, c2, str(bundle))
    from_path = kernel_store_writer.fetch(store, c1[:10], str(source))  # abbreviated: resolved
    assert from_path.commit == c1 and from_path.fingerprint == FINGERPRINT
    assert from_bundle.fingerprint != FINGERPRINT and store.commit_fingerprint(c2)
    url = kernel_store_writer.fetch(KernelStore(tmp_path / "s2"), c2, f"file://{source}")
    assert url.fingerprint == from_bundle.fingerprint
    assert [n for n in os.listdir(store.root) if n.startswith(".tmp-")] == []

    with pytest.raises(KernelStoreError, match="has no commit"):
        kernel_store_writer.fetch(store, "e" * 40, str(bundle))
    not_ouro = tmp_path / "plain"
    not_ouro.mkdir()
    (not_ouro / "x").write_text("x")
    git(not_ouro, "init", "-q")
    plain = commit(not_ouro, "not ouro")
    with pytest.raises(KernelStoreError, match="has no ouro kernel"):
        kernel_store_writer.fetch(store, plain, str(not_ouro))
    junk = tmp_path / "junk.bundle"
    junk.write_bytes(b"# v2 git bundle\n" + b"0" * 40 + b" refs/heads/x\n\nPACKjunk")
    with pytest.raises(KernelStoreError, match="not a readable git bundle"):
        kernel_store_writer.fetch(store, c1, str(junk))
    with pytest.raises(KernelStoreError, match="neither a git repository nor a bundle"):
        kernel_store_writer.fetch(store, c1, str(not_ouro / "x"))


def test_prune_keeps_what_known_lineages_need(tmp_path: Path) -> None:
    store = KernelStore(tmp_path / "store")
    needed = kernel_store_writer.put(store, RUNNING, C)
    seed = "transaction/organism.el"
    other = dict(RUNNING, **{seed: RUNNING[seed] + b";; other\n"})
    spare = kernel_store_writer.put(store, other, "d" * 40)
    third = kernel_store_writer.put(store, dict(other, **{"x.py": b""}), "e" * 40)
    needs = {needed.fingerprint: ["alpha"]}
    would = kernel_store_writer.prune(store, needs, keep=third.fingerprint, dry_run=True)
    assert [row.fingerprint for row in would] == [spare.fingerprint]
    assert spare.path.exists()
    gone = kernel_store_writer.prune(store, needs, keep=third.fingerprint)
    assert [row.fingerprint for row in gone] == [spare.fingerprint]
    assert not spare.path.exists() and needed.path.exists() and third.path.exists()
    remove_tree(store.root)


def test_the_running_kernel_is_stored_once_per_process_for_a_whole_fleet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every lineage of an apply asks for the running kernel's entry: its files are read,
    hashed and verified the first time only (issue 21: ~0.1 s of CPU per lineage)."""
    from reconciler.kernel.base import identity as kernel_identity

    running = Identity("r", "main", C, kernel_identity.fingerprint())
    store = KernelStore(tmp_path / "kernels")
    reads = []
    real = kernel_identity.read_trusted
    monkeypatch.setattr(kernel_identity, "read_trusted", lambda: reads.append(1) or real())
    first = kernel_store_writer.store_running(store, running)
    assert [kernel_store_writer.store_running(store, running) for _ in range(3)] == [first] * 3
    assert len(reads) == 1
    assert store.get(running.fingerprint) == first  # the entry is really there
    other = KernelStore(tmp_path / "other")  # another store is another entry
    assert kernel_store_writer.store_running(other, running).path.parent == other.root
    assert len(reads) == 2
