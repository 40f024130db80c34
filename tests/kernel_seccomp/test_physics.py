"""Physics release 2 is a new physics version: a lineage born under the kernel before it
keeps running under that stored kernel (no filter, no sandbox disclosure), while one
born under it runs confined -- in-process, and from the kernel store as a pinned
subprocess once a later kernel change makes it an old lineage in turn; and at the real
boundary of physics release 3, a lineage born under release 2 keeps its stored kernel, and
at that of release 5, one born under release 4 keeps its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base import seccomp_filter
from reconciler.kernel.sandbox import seccomp_bpf
from tests.apply.helpers import write_spec
from tests.host import require
from tests.kernels.checkout import (
    apply_json,
    change_kernel,
    commit,
    git,
    observation,
    replace_source,
    source_at,
    workspace,
)
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

# main just before physics release 2 (the seccomp filter, keyring and bounds) landed
BEFORE_RELEASE_2 = "1f9102200c575934ce060b9473fd6ed491c1a261"


# main just before physics release 3 (the kernel waits on its broker with poll(2))
BEFORE_RELEASE_3 = "33611e551956eef8b8d084e1ade2b084ef2fc382"




def _record(state: Path, name: str, number: int) -> dict[str, Any]:
    return observation(lineage_paths(state, name).observations, number)



def test_lineages_born_before_release_2_keep_their_physics(tmp_path: Path) -> None:
    old_source = tmp_path / "ouro-before"
    require(source_at(BEFORE_RELEASE_2, old_source), "needs this repository's git history")
    space = workspace(tmp_path, source=old_source)
    checkout, state, env, specs = space.checkout, space.state, space.env, space.specs

    write_spec(specs, "before", 1)
    apply_json(checkout, env, specs)  # born under the kernel before release 2
    assert "sandbox" not in _record(state, "before", 1)["constraints"]

    replace_source(checkout)
    commit(checkout, "release 2")
    write_spec(specs, "before", 2)
    write_spec(specs, "after", 1)
    apply_json(checkout, env, specs)
    extended = _record(state, "before", 2)
    assert extended["ran_with"]["kernel"]["source"] == "store"  # its own stored kernel
    assert "sandbox" not in extended["constraints"]  # ... with its own physics
    born = _record(state, "after", 1)
    assert born["outcome"] == "no-change", born["stderr_tail"]
    assert born["ran_with"]["kernel"]["source"] == "running"
    seccomp = born["constraints"]["sandbox"]["seccomp"]
    assert seccomp["table_sha256"] == seccomp_filter.table_sha256()
    assert born["seccomp_bpf_sha256"] == seccomp_bpf.bpf_sha256()
    assert extended.get("seccomp_bpf_sha256") is None

    # a later kernel change: release 2's lineage now runs its stored kernel, a pinned
    # subprocess under another package name, still confined
    change_kernel(checkout, "after release 2")
    commit(checkout, "a later physics")
    write_spec(specs, "before", 2)
    write_spec(specs, "after", 2)
    apply_json(checkout, env, specs)
    pinned = _record(state, "after", 2)
    assert pinned["ran_with"]["kernel"]["source"] == "store", pinned["ran_with"]
    assert pinned["ran_with"]["kernel"]["package"].startswith("ouro_kernel_")
    assert pinned["outcome"] == "no-change", pinned["stderr_tail"]
    assert pinned["constraints"]["sandbox"] == born["constraints"]["sandbox"]
    assert pinned["seccomp_bpf_sha256"] == born["seccomp_bpf_sha256"]
    json.dumps(pinned)
    assert git(checkout, "rev-list", "--count", "HEAD") == "3"


def test_lineages_born_under_release_2_keep_their_kernel_after_release_3(
        tmp_path: Path) -> None:
    """The real boundary: main before release 3 births a lineage; this ouro extends it
    by its stored kernel (release 2's fingerprint) and births new ones under its own."""
    old_source = tmp_path / "ouro-before"
    require(source_at(BEFORE_RELEASE_3, old_source), "needs this repository's git history")
    space = workspace(tmp_path, source=old_source)
    checkout, state, env, specs = space.checkout, space.state, space.env, space.specs

    write_spec(specs, "two", 1)
    apply_json(checkout, env, specs)  # born under release 2
    born_two = _record(state, "two", 1)["ran_with"]["kernel"]

    replace_source(checkout)
    commit(checkout, "release 3")
    write_spec(specs, "two", 2)
    write_spec(specs, "three", 1)
    apply_json(checkout, env, specs)
    extended = _record(state, "two", 2)
    assert extended["outcome"] == "no-change", extended["stderr_tail"]
    kernel = extended["ran_with"]["kernel"]
    assert kernel["source"] == "store", extended["ran_with"]  # its own stored kernel
    assert (kernel["commit"], kernel["fingerprint"]) == \
        (born_two["commit"], born_two["fingerprint"])
    three = _record(state, "three", 1)
    assert three["outcome"] == "no-change", three["stderr_tail"]
    assert three["ran_with"]["kernel"]["source"] == "running"
    assert three["ran_with"]["kernel"]["fingerprint"] != born_two["fingerprint"]  # new physics


# main just before physics release 5 (the allow-list filter, probes under a life's bounds,
# an empty completion a reply)
BEFORE_RELEASE_5 = "a5035bcbcc7628ac70689ccfced384a02ee5c4f5"


def test_lineages_born_under_release_4_keep_their_kernel_after_release_5(
        tmp_path: Path) -> None:
    """The real boundary: main before release 5 births a lineage (its filter a deny list,
    default allow); this ouro extends it by its stored kernel, unchanged -- the same
    commit, fingerprint and filter -- and births new ones under the allow list."""
    old_source = tmp_path / "ouro-before"
    require(source_at(BEFORE_RELEASE_5, old_source), "needs this repository's git history")
    space = workspace(tmp_path, source=old_source)
    checkout, state, env, specs = space.checkout, space.state, space.env, space.specs

    write_spec(specs, "four", 1)
    apply_json(checkout, env, specs)  # born under release 4
    born = _record(state, "four", 1)
    born_kernel = born["ran_with"]["kernel"]
    assert born["constraints"]["sandbox"]["seccomp"]["default_action"] == "allow"
    assert "running_totals" in born  # release 4's field

    replace_source(checkout)
    commit(checkout, "release 5")
    write_spec(specs, "four", 2)
    write_spec(specs, "five", 1)
    apply_json(checkout, env, specs)
    extended = _record(state, "four", 2)
    assert extended["outcome"] == "no-change", extended["stderr_tail"]
    kernel = extended["ran_with"]["kernel"]
    assert kernel["source"] == "store", extended["ran_with"]  # its own stored kernel
    assert (kernel["commit"], kernel["fingerprint"]) == \
        (born_kernel["commit"], born_kernel["fingerprint"])
    assert extended["constraints"]["sandbox"] == born["constraints"]["sandbox"]  # unchanged
    assert extended["seccomp_bpf_sha256"] == born["seccomp_bpf_sha256"]
    five = _record(state, "five", 1)
    assert five["outcome"] == "no-change", five["stderr_tail"]
    assert five["ran_with"]["kernel"]["source"] == "running"
    assert five["ran_with"]["kernel"]["fingerprint"] != born_kernel["fingerprint"]
    seccomp = five["constraints"]["sandbox"]["seccomp"]
    assert (seccomp["schema"], seccomp["default_action"]) == ("ouro-seccomp/v2", "ENOSYS")
    assert seccomp["table_sha256"] == seccomp_filter.table_sha256()
    assert five["seccomp_bpf_sha256"] == seccomp_bpf.bpf_sha256()
    assert five["seccomp_bpf_sha256"] != born["seccomp_bpf_sha256"]
