"""A fork under its parent's pinned kernel against one under the running kernel: real ouro
checkouts (the kernel changes between two commits), real sandboxes, real git."""

from __future__ import annotations

import json
from pathlib import Path

from tests.apply.helpers import write_spec
from tests.forks.helpers import fork_spec
from tests.kernels.checkout import (
    change_kernel,
    commit,
    observation,
    ouro,
    root_metadata,
    workspace,
)
from tests.observe.builder import lineage_paths


def test_a_fork_under_the_parents_kernel_and_one_under_the_running_kernel(
        tmp_path: Path) -> None:
    space = workspace(tmp_path)
    source, c1, state, env, specs = space.checkout, space.c1, space.state, space.env, space.specs
    write_spec(specs, "scribe", 2)
    born = ouro(source, env, "apply", "--yes", str(specs))
    assert born.returncode == 0, born.stdout + born.stderr
    parent = root_metadata(lineage_paths(state, "scribe").git_dir, "lineage-scribe")
    assert parent["instrument_commit"] == c1

    change_kernel(source, "C2")  # new physics: the running kernel is no longer scribe's
    c2 = commit(source, "C2: the seed organism changes")
    fork_spec(specs, "replay", "scribe", 2, kernel="parent")
    fork_spec(specs, "fresh", "scribe", 2)
    plan = ouro(source, env, "plan", "--json", str(specs))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    items = {item["name"]: item for item in json.loads(plan.stdout)["lineages"]}
    assert items["replay"]["kernel"]["commit"] == c1, items["replay"]
    assert items["replay"]["kernel"]["source"] in ("store", "materialized")
    assert items["replay"]["fork"]["kernel"] == "parent"
    assert items["fresh"]["kernel"] is None and items["fresh"]["fork"]["kernel"] == "running"
    applied = ouro(source, env, "apply", "--yes", "--json", str(specs))
    assert applied.returncode == 0, applied.stdout + applied.stderr

    replay = root_metadata(lineage_paths(state, "replay").git_dir, "lineage-replay")
    fresh = root_metadata(lineage_paths(state, "fresh").git_dir, "lineage-fresh")
    # the replay is born under the parent's physics, byte for byte its identity
    for key in ("instrument_repository", "instrument_ref", "instrument_commit",
                "instrument_fingerprint"):
        assert replay[key] == parent[key], key
    assert (replay["ouro_fork"]["kernel"], replay["ouro_fork"]["same_physics"]) == (
        "parent", True)
    # the other under the running kernel: new physics, recorded as such
    assert fresh["instrument_commit"] == c2
    assert fresh["instrument_fingerprint"] != parent["instrument_fingerprint"]
    assert (fresh["ouro_fork"]["kernel"], fresh["ouro_fork"]["same_physics"]) == (
        "running", False)
    for record in (replay["ouro_fork"], fresh["ouro_fork"]):
        assert record["parent_kernel"] == {"commit": c1,
                                           "fingerprint": parent["instrument_fingerprint"]}
    # both ran their first generation, each under its own kernel
    first = observation(lineage_paths(state, "replay").observations, 1)["ran_with"]
    assert first["kernel"]["commit"] == c1 and first["kernel"]["source"] != "running"
    assert first["fork"] == replay["ouro_fork"]
    other = observation(lineage_paths(state, "fresh").observations, 1)["ran_with"]
    assert other["kernel"] == {"commit": c2, "fingerprint": fresh["instrument_fingerprint"],
                               "source": "running"}
    # and both seeds are scribe's gen 2 tree: the same objects, whatever the physics
    verified = ouro(source, env, "verify", "--json", str(specs))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = {item["lineage"]: item for item in json.loads(verified.stdout)["lineages"]}
    assert report["replay"]["ancestry"] == report["fresh"]["ancestry"] == "linked"
