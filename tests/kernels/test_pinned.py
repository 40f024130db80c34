"""Pinned kernels end to end: real checkouts, commits, bundles, sandboxes and cgroups.

One story: a checkout at C1 births a lineage; a README-only commit C2 extends it
in-process; a kernel change C3 extends it with C1's kernel from the store while
it births a new lineage under C3 (one ``apply --parallel 2``); an altered store
entry is refused; the store deleted, C1's kernel is materialized from the
checkout's objects; with no objects either, the lineage is refused
``kernel-unavailable`` naming ``ouro kernel fetch``, and after fetching C1 from a
bundle it is extended again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apply.helpers import write_spec
from tests.kernels.checkout import (
    change_kernel,
    commit,
    environment,
    git,
    make_checkout,
    observation,
    ouro,
    remove_tree,
    root_metadata,
    workspace,
)
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]


def _apply(checkout: Path, env: dict[str, str], *args: str) -> dict[str, object]:
    done = ouro(checkout, env, "apply", "--yes", "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    value: dict[str, object] = json.loads(done.stdout)
    return value


def _ran_with(state: Path, name: str, number: int) -> dict[str, object]:
    record = observation(lineage_paths(state, name).observations, number)
    ran_with = record["ran_with"]
    assert isinstance(ran_with, dict), record
    return ran_with


def _store_entry(state: Path, fingerprint: str) -> Path:
    return state / ".kernels" / fingerprint


def test_a_lineage_outlives_ouro_versions(tmp_path: Path) -> None:
    space = workspace(tmp_path)
    source, c1, state, env, specs = space.checkout, space.c1, space.state, space.env, space.specs

    # C1 births
    write_spec(specs, "old", 1)
    _apply(source, env, str(specs))
    born = root_metadata(lineage_paths(state, "old").git_dir, "lineage-old")
    assert born["instrument_commit"] == c1
    f1 = born["instrument_fingerprint"]
    first = _ran_with(state, "old", 1)
    assert first["kernel"] == {"commit": c1, "fingerprint": f1, "source": "running"}
    assert first["control_plane"] == {"ouro_version": "0.1.0", "ouro_commit": c1}
    versions = first["versions"]
    assert isinstance(versions, dict)
    assert versions["pygit2"] and versions["python"] and versions["bubblewrap"]
    assert str(versions["emacs"]).startswith("GNU Emacs")
    assert (_store_entry(state, f1) / "entry.json").is_file()  # the birth kernel is stored

    # C2: README only -> the same physics, extended in-process
    (source / "README.md").write_text((source / "README.md").read_text() + "\nA typo.\n")
    c2 = commit(source, "C2: README")
    write_spec(specs, "old", 2)
    plan = ouro(source, env, "plan", "--json", str(specs))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    (item,) = json.loads(plan.stdout)["lineages"]
    assert item["kernel"] == {"commit": c1, "fingerprint": f1, "source": "running",
                              "reason": None, "fetch": None}
    _apply(source, env, str(specs))
    second = _ran_with(state, "old", 2)
    assert second["kernel"] == {"commit": c1, "fingerprint": f1, "source": "running"}
    assert second["control_plane"] == {"ouro_version": "0.1.0", "ouro_commit": c2}

    # C3: the kernel changes -> C1's lineage runs C1's kernel from the store, a new
    # lineage is born under C3, both in one apply
    change_kernel(source, "C3")
    c3 = commit(source, "C3: the seed organism changes")
    write_spec(specs, "old", 3)
    write_spec(specs, "young", 1)
    plan = ouro(source, env, "plan", str(specs))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert f"kernel {c1[:12]}" in plan.stdout and "from the kernel store" in plan.stdout
    report = _apply(source, env, "--parallel", "2", str(specs))
    by_name = {item["name"]: item for item in report["lineages"]}  # type: ignore[union-attr]
    assert by_name["old"]["generations_run"] == 1 and by_name["young"]["generations_run"] == 1
    third = _ran_with(state, "old", 3)
    kernel = third["kernel"]
    assert isinstance(kernel, dict)
    assert (kernel["commit"], kernel["fingerprint"], kernel["source"]) == (c1, f1, "store")
    assert kernel["package"].startswith("ouro_kernel_")  # it ran as a package of another name
    assert third["control_plane"] == {"ouro_version": "0.1.0", "ouro_commit": c3}
    young = root_metadata(lineage_paths(state, "young").git_dir, "lineage-young")
    assert young["instrument_commit"] == c3 and young["instrument_fingerprint"] != f1
    assert _ran_with(state, "young", 1)["kernel"] == {
        "commit": c3, "fingerprint": young["instrument_fingerprint"], "source": "running"}
    listed = ouro(source, env, "kernel", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["fingerprint"]: row for row in json.loads(listed.stdout)["kernels"]}
    assert rows[f1]["lineages"] == ["old"] and c1 in rows[f1]["commits"]
    assert rows[young["instrument_fingerprint"]]["lineages"] == ["young"]

    # an altered store entry is refused, never run
    entry = _store_entry(state, f1)
    victim = next((entry).glob("ouro_kernel_*/transaction/generation.py"))
    victim.chmod(0o644)
    victim.write_bytes(victim.read_bytes() + b"\n# tampered\n")
    write_spec(specs, "old", 4)
    plan = ouro(source, env, "plan", "--json", str(specs))
    assert plan.returncode == 1, plan.stdout + plan.stderr
    old = next(i for i in json.loads(plan.stdout)["lineages"] if i["name"] == "old")
    assert old["reason"] == "kernel-damaged" and "is damaged" in old["message"], old
    refused = ouro(source, env, "apply", "--yes", "--json", str(specs))
    assert refused.returncode == 1
    assert observation(lineage_paths(state, "old").observations, 3)  # still three
    with pytest.raises(KeyError):
        observation(lineage_paths(state, "old").observations, 4)

    # the store deleted: C1's kernel is materialized from the checkout's objects
    remove_tree(state / ".kernels")
    _apply(source, env, str(specs))
    fourth = _ran_with(state, "old", 4)["kernel"]
    assert isinstance(fourth, dict)
    assert (fourth["commit"], fourth["source"]) == (c1, "materialized")
    assert (_store_entry(state, f1) / "entry.json").is_file()

    # no store, and a checkout without C1's objects: refused, naming the fetch
    elsewhere = make_checkout(tmp_path / "ouro-elsewhere", source=source)
    remove_tree(state / ".kernels")
    write_spec(specs, "old", 5)
    plan = ouro(elsewhere, env, "plan", "--json", str(specs))
    assert plan.returncode == 1, plan.stdout + plan.stderr
    old = next(i for i in json.loads(plan.stdout)["lineages"] if i["name"] == "old")
    assert old["reason"] == "kernel-unavailable", old
    assert f"ouro kernel fetch {c1}" in old["message"]
    assert old["kernel"]["fetch"].startswith(f"ouro kernel fetch {c1} --from ")
    status = ouro(elsewhere, env, "status", str(specs))
    assert f"ouro kernel fetch {c1}" in status.stdout, status.stdout + status.stderr

    bundle = tmp_path / "ouro.bundle"
    git(source, "bundle", "create", str(bundle), "--all")
    fetched = ouro(elsewhere, env, "kernel", "fetch", c1, "--from", str(bundle))
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert f1 in fetched.stdout
    # young's C3 is unknown here too (this checkout's history is another): it needs a fetch
    plan = ouro(elsewhere, env, "plan", "--json", str(specs))
    reasons = {i["name"]: i["reason"] for i in json.loads(plan.stdout)["lineages"]}
    assert reasons == {"old": None, "young": "kernel-unavailable"}, plan.stdout
    _apply(elsewhere, env, "--select", "old", str(specs))
    fifth = _ran_with(state, "old", 5)["kernel"]
    assert isinstance(fifth, dict)
    assert (fifth["commit"], fifth["fingerprint"], fifth["source"]) == (c1, f1, "store")


def test_a_spec_pin_births_under_an_older_kernel(tmp_path: Path) -> None:
    space = workspace(tmp_path)
    source, c1, state, env, specs = space.checkout, space.c1, space.state, space.env, space.specs
    change_kernel(source, "C2")
    c2 = commit(source, "C2: the seed organism changes")
    spec = write_spec(specs, "pinned", 1)
    spec.write_text(spec.read_text() + f"  instrument:\n    commit: {c1}\n")
    plan = ouro(source, env, "plan", "--json", str(specs))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    (item,) = json.loads(plan.stdout)["lineages"]
    assert (item["action"], item["kernel"]["commit"], item["kernel"]["source"]) == (
        "create", c1, "materialized")
    _apply(source, env, str(specs))
    born = root_metadata(lineage_paths(state, "pinned").git_dir, "lineage-pinned")
    assert born["instrument_commit"] == c1
    kernel = _ran_with(state, "pinned", 1)["kernel"]
    assert isinstance(kernel, dict)
    assert (kernel["commit"], kernel["fingerprint"], kernel["source"]) == (
        c1, born["instrument_fingerprint"], "materialized")
    assert _ran_with(state, "pinned", 1)["control_plane"] == {
        "ouro_version": "0.1.0", "ouro_commit": c2}
    # a pin of a commit nobody has: refused before anything is created, naming the fetch
    spec.write_text(spec.read_text().replace(c1, "ab" * 20).replace("pinned", "ghost"))
    spec.rename(specs / "ghost.yaml")
    plan = ouro(source, env, "plan", "--json", str(specs))
    assert plan.returncode == 1 and plan.stdout, plan.stdout + plan.stderr
    (item,) = json.loads(plan.stdout)["lineages"]
    assert (item["action"], item["reason"]) == ("refuse", "kernel-unavailable"), item
    assert f"ouro kernel fetch {'ab' * 20}" in item["message"]


def test_the_original_instruments_lineage_is_refused_as_not_ouro(
        tmp_path: Path, original_lineage: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "fixture", 10, provider="openai",
               extra_model="name: gpt-5.6", storage=str(original_lineage))
    env = environment(tmp_path / "state", OURO_INSTRUMENT_COMMIT="5" * 40)
    from tests.conftest import REPO_ROOT

    plan = ouro(REPO_ROOT, env, "plan", "--json", str(specs))
    assert plan.returncode == 1, plan.stdout + plan.stderr
    (item,) = json.loads(plan.stdout)["lineages"]
    assert (item["action"], item["reason"]) == ("refuse", "foreign-kernel"), item
    assert "not an ouro kernel" in item["message"]
    assert "github.com/scottviteri/ouroboros" in item["message"]
    assert item["observed_generations"] == 5
