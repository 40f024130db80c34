"""`model: {provider: recorded, lineage: NAME}` on real lineages: the same replies under the
same ceilings grow the same trees; under a memory ceiling too small for the third reply's
organism the counterfactual dies where its source lived; plan counts the replies left and
apply stops when they run out; every observation names the replies it was answered with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.kernel.transaction.lineage import ORGANISM
from tests.apply.helpers import run_ouro, write_spec
from tests.reproduce.helpers import grow

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

SEED = ORGANISM.read_text()
# Four replies, each an organism that asks for its successor as the seed does; the third
# also holds 96 MiB while it lives.
HUNGRY = [SEED + "\n;; form 2\n", SEED + "\n;; form 3\n",
          "(defvar hungry-ballast (make-string (* 96 1024 1024) ?x))\n" + SEED,
          SEED + "\n;; form 5\n"]


def _generations(state: Path, name: str) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Each generation's observation and its tree (path -> blob id), journal left out."""
    repo = pygit2.Repository(str(state / f"{name}.git"))
    observations = pygit2.Repository(str(state / f"{name}.observations"))
    head = observations.revparse_single(f"observations/lineage-{name}").peel(pygit2.Commit)
    found = []
    for entry in sorted(head.tree["generations"], key=lambda e: e.name):
        observation = json.loads(observations[entry.id].data)
        tree = repo[observation["lineage_commit"]].peel(pygit2.Commit).tree
        files = {e.name: str(e.id) for e in tree if e.name != "journal.md"}
        found.append((observation, files))
    return found


def _counterfactual(specs: Path, name: str, generations: int, memory: str = "512MiB") -> Path:
    spec = write_spec(specs, name, generations, provider="recorded",
                      extra_model="lineage: hungry")
    spec.write_text(spec.read_text().replace("memory: 512MiB", f"memory: {memory}"))
    return spec


@pytest.fixture
def hungry(specs: Path, env: dict[str, str], tmp_path: Path) -> Path:
    grow(specs, env, "hungry", 4, HUNGRY)
    return tmp_path / "state"


def test_the_same_replies_under_the_same_ceilings_grow_the_same_trees(
        hungry: Path, specs: Path, env: dict[str, str]) -> None:
    spec = _counterfactual(specs, "same", 4)
    plan = run_ouro("plan", str(spec), env=env)
    assert "recorded replies of hungry (from its gen 1): 4 of 4 remain" in plan.stdout
    done = run_ouro("apply", "-y", str(spec), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    source, same = _generations(hungry, "hungry"), _generations(hungry, "same")
    assert [files for _, files in same] == [files for _, files in source]
    assert [o["outcome"] for o, _ in same] == [o["outcome"] for o, _ in source]
    assert {o["ran_with"]["recorded"]["lineage"] for o, _ in same} == {"hungry"}
    assert {o["ran_with"]["recorded"]["replies"] for o, _ in same} == {4}


def test_under_a_smaller_memory_ceiling_the_third_replys_organism_dies(
        hungry: Path, specs: Path, env: dict[str, str]) -> None:
    spec = _counterfactual(specs, "lean", 4, memory="64MiB")
    done = run_ouro("apply", "-y", str(spec), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    source, lean = _generations(hungry, "hungry"), _generations(hungry, "lean")
    assert [o["outcome"].split(" ")[0] for o, _ in source] == ["changed"] * 4
    assert [o["outcome"].split(" ")[0] for o, _ in lean][:3] == ["changed"] * 3
    died = lean[3][0]
    assert (died["outcome"], died["exit_status"]) == ("cgroup_oom", 137), died["outcome"]
    assert lean[2][1] == source[2][1]  # the trees agree until the third reply's organism


def test_when_the_recorded_replies_run_out_the_lineage_stops(
        hungry: Path, specs: Path, env: dict[str, str]) -> None:
    spec = _counterfactual(specs, "more", 5)
    done = run_ouro("apply", "-y", str(spec), env=env)
    assert done.returncode == 1
    assert "stopped before gen 5" in done.stdout + done.stderr
    plan = run_ouro("plan", str(spec), env=env)
    assert "0 of 4 remain" in plan.stdout
    assert len(_generations(hungry, "more")) == 4


def test_a_fork_is_answered_from_after_its_fork_point_and_reproduces(
        hungry: Path, specs: Path, env: dict[str, str]) -> None:
    spec = _counterfactual(specs, "forked", 2)
    spec.write_text(spec.read_text() + "  from: {lineage: hungry, generation: 2}\n")
    plan = run_ouro("plan", str(spec), env=env)
    assert "recorded replies of hungry (from its gen 3): 2 of 2 remain" in plan.stdout, plan
    done = run_ouro("apply", "-y", str(spec), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    source, forked = _generations(hungry, "hungry"), _generations(hungry, "forked")
    # its gen 1 got hungry's third reply: the organism hungry's gen 3 installed
    assert forked[0][1]["organism.el"] == source[2][1]["organism.el"]
    assert forked[1][1]["organism.el"] == source[3][1]["organism.el"]
    assert forked[0][0]["ran_with"]["recorded"]["from_generation"] == 3
    again = run_ouro("reproduce", "forked", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.startswith("reproduced 2 of 2 generations")
