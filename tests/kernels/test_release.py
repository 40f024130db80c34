"""Physics release 2, as a user meets it: a lineage born under ouro as it was before the
release (main at a0fe196, one flat kernel folder, fingerprint v1) is extended after it by
its stored kernel (a v1 store entry, run through its entry point); a lineage born now is
born under the new physics (the kernel in sub-packages, fingerprint v2, a v2 entry).

The old ouro is a real git commit holding a0fe196's tree (``fixtures/ouro-a0fe196.bundle``,
made with ``git archive a0fe196 reconciler pyproject.toml setup.py README.md`` committed
once), cloned and run from its checkout as its user ran it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pygit2
import pytest

from reconciler.engine import kernel_store_writer
from reconciler.kernel.base import identity
from reconciler.state.kernel_store import (
    ENTRY_SCHEMA,
    ENTRY_SCHEMA_V1,
    KernelStore,
    kernel_tree_files,
)
from tests.apply.helpers import write_spec
from tests.host import require
from tests.kernels.checkout import (
    commit,
    environment,
    git,
    make_checkout,
    observation,
    ouro,
    root_metadata,
)
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

BUNDLE = Path(__file__).resolve().parent / "fixtures" / "ouro-a0fe196.bundle"
# The commit the bundle holds: a0fe196's tree, committed once.
OLD_COMMIT = "250b7beab53a51b5f0af21d049ac83efade8f88e"


def _apply(checkout: Path, env: dict[str, str], *args: str) -> dict[str, object]:
    done = ouro(checkout, env, "apply", "--yes", "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    value: dict[str, object] = json.loads(done.stdout)
    return value


def _entry_schema(state: Path, fingerprint: str) -> str:
    record = json.loads((state / ".kernels" / fingerprint / "entry.json").read_text())
    schema: str = record["schema"]
    return schema


def _old_ouro(folder: Path) -> Path:
    git(folder.parent, "clone", "-q", "-b", "main", str(BUNDLE), str(folder))
    assert git(folder, "rev-parse", "HEAD") == OLD_COMMIT
    return folder


def test_the_old_physics_goes_on_and_new_lineages_get_the_new(tmp_path: Path) -> None:
    require(shutil.which("bwrap") is not None and shutil.which("git") is not None,
            "needs bubblewrap and git")
    old = _old_ouro(tmp_path / "old-ouro")
    old_files = kernel_tree_files(pygit2.Repository(str(old)), OLD_COMMIT) or {}
    assert "identity.py" in old_files and all("/" not in name for name in old_files)
    f_old = identity.fingerprint_of(old_files)
    new = make_checkout(tmp_path / "ouro")
    f_new = identity.fingerprint(new / "reconciler" / "kernel")
    assert "base/identity.py" in identity.read_trusted(new / "reconciler" / "kernel")
    assert f_new != f_old
    state, specs = tmp_path / "state", tmp_path / "specs"
    specs.mkdir()
    env = environment(state)

    # before the release: the old ouro births and extends, storing its own kernel (v1)
    write_spec(specs, "old", 1)
    _apply(old, env, str(specs))
    born = root_metadata(lineage_paths(state, "old").git_dir, "lineage-old")
    assert (born["instrument_commit"], born["instrument_fingerprint"]) == (OLD_COMMIT, f_old)
    assert _entry_schema(state, f_old) == ENTRY_SCHEMA_V1

    # after it: the new ouro extends the old lineage by its stored kernel, and births anew
    write_spec(specs, "old", 2)
    write_spec(specs, "young", 1)
    _apply(new, env, str(specs))
    second = observation(lineage_paths(state, "old").observations, 2)["ran_with"]
    assert second["kernel"]["commit"] == OLD_COMMIT
    assert second["kernel"]["fingerprint"] == f_old
    assert second["kernel"]["source"] == "store"
    assert second["kernel"]["package"].startswith("ouro_kernel_")
    young = root_metadata(lineage_paths(state, "young").git_dir, "lineage-young")
    assert young["instrument_fingerprint"] == f_new
    first = observation(lineage_paths(state, "young").observations, 1)["ran_with"]
    assert first["kernel"] == {"commit": young["instrument_commit"], "fingerprint": f_new,
                               "source": "running"}
    assert _entry_schema(state, f_new) == ENTRY_SCHEMA

    # OURO_INSTRUMENT_COMMIT still names the commit a lineage born now records
    write_spec(specs, "named", 1)
    _apply(new, dict(env, OURO_INSTRUMENT_COMMIT="e" * 40), str(specs))
    named = root_metadata(lineage_paths(state, "named").git_dir, "lineage-named")
    assert (named["instrument_commit"], named["instrument_fingerprint"]) == ("e" * 40, f_new)

    listed = ouro(new, env, "kernel", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["fingerprint"]: row for row in json.loads(listed.stdout)["kernels"]}
    assert rows[f_old]["lineages"] == ["old"] and rows[f_old]["damaged"] is None
    assert rows[f_new]["lineages"] == ["named", "young"] and rows[f_new]["damaged"] is None


def test_kernel_fetch_rebuilds_either_layout_from_git(tmp_path: Path) -> None:
    """``ouro kernel fetch`` of a commit from before the release rebuilds its flat kernel as
    a v1 entry (fingerprint v1); of a commit after it, the tree as a v2 entry."""
    require(shutil.which("git") is not None, "needs git")
    store = KernelStore(tmp_path / "store")
    old = kernel_store_writer.fetch(store, OLD_COMMIT[:12], str(BUNDLE))
    assert (old.commit, old.schema) == (OLD_COMMIT, ENTRY_SCHEMA_V1)
    assert all("/" not in name for name in old.files) and "identity.py" in old.files
    assert sorted(p.name for p in old.package_dir.iterdir()) == sorted([*old.files,
                                                                         "__pycache__"])
    new = make_checkout(tmp_path / "ouro")
    fetched = kernel_store_writer.fetch(store, git(new, "rev-parse", "HEAD"), str(new))
    assert fetched.schema == ENTRY_SCHEMA and "transaction/generation.py" in fetched.files
    assert fetched.fingerprint == identity.fingerprint(new / "reconciler" / "kernel")
    assert old.fingerprint != fetched.fingerprint
    assert [row.damaged for row in kernel_store_writer.list_store(store, {})] == [None, None]
    # prune removes the v1 entry no known lineage needs, and keeps the running one
    gone = kernel_store_writer.prune(store, {}, keep=fetched.fingerprint)
    assert [row.fingerprint for row in gone] == [old.fingerprint] and not old.path.exists()
    assert store.get(fetched.fingerprint) is not None

    # a v1 kernel is its folder's own files: a sub-folder there was never its physics
    checkout = _old_ouro(tmp_path / "old-ouro")
    (checkout / "reconciler" / "kernel" / "notes").mkdir()
    (checkout / "reconciler" / "kernel" / "notes" / "x.py").write_text("X = 1\n")
    stray = commit(checkout, "a folder beside the v1 kernel's files")
    same = kernel_store_writer.fetch(KernelStore(tmp_path / "s2"), stray, str(checkout))
    assert same.fingerprint == old.fingerprint and same.files == old.files
