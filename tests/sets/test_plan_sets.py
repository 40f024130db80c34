"""A set in plan and apply: members grouped, raising replicas creates, lowering orphans
(real lineages made by a real `ouro apply` of the offline echo provider; nothing deleted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.plan.planner import Orphan, find_orphans
from tests.apply.helpers import assert_invariant, run_ouro
from tests.observe.builder import lineage_paths

SET = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {{name: grow}}
spec:
  replicas: {replicas}
  matrix:
    model: [{{provider: echo}}]
  template: {{generations: 1}}
---
apiVersion: ouro/v1
kind: Lineage
metadata: {{name: alone}}
spec: {{generations: 1, model: {{provider: echo}}}}
"""


def _plan(spec: Path, env: dict[str, str], *args: str) -> tuple[int, dict[str, object]]:
    result = run_ouro("plan", "--json", *args, str(spec), env=env)
    assert result.returncode in (0, 2), result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_raising_creates_and_lowering_orphans_without_deleting(
        tmp_path: Path, env: dict[str, str]) -> None:
    spec = tmp_path / "set.yaml"
    spec.write_text(SET.format(replicas=2))
    applied = run_ouro("apply", "-y", str(spec), env=env)
    assert applied.returncode == 0, applied.stderr
    code, plan = _plan(spec, env)
    lineages = plan["lineages"]
    assert isinstance(lineages, list)
    first_two = [item["name"] for item in lineages[:2]]
    assert code == 0 and [item["set"] for item in lineages] == ["grow", "grow", None]
    assert plan["orphaned"] == []
    spec.write_text(SET.format(replicas=3))  # raising: one member to create, none renamed
    code, plan = _plan(spec, env)
    lineages = plan["lineages"]
    assert isinstance(lineages, list)
    assert code == 2 and [item["name"] for item in lineages[:2]] == first_two
    assert [item["action"] for item in lineages] == ["in-sync", "in-sync", "create", "in-sync"]
    spec.write_text(SET.format(replicas=1))  # lowering: the second member is orphaned
    code, plan = _plan(spec, env)
    state = tmp_path / "state"
    assert code == 0
    assert plan["orphaned"] == [{"name": first_two[1], "set": "grow",
                                 "path": str(state / first_two[1])}]
    text = run_ouro("plan", str(spec), env=env)
    assert "set grow: 1 member, 1 orphaned" in text.stdout
    assert f"  ? {first_two[1]}" in text.stdout and "orphaned" in text.stdout
    assert "1 orphaned (kept)" in text.stdout
    assert "lineages not in a set:" in text.stdout
    markdown = run_ouro("plan", "--markdown", str(spec), env=env).stdout
    assert f"| `{first_two[0]}` (set `grow`) | 1 | 1 | 0 |" in markdown
    assert f"| `{first_two[1]}` | `grow` | `{state / first_two[1]}` |" in markdown
    again = run_ouro("apply", "-y", str(spec), env=env)
    assert again.returncode == 0, again.stderr
    for name in first_two:  # nothing deleted: both lineages are whole
        assert_invariant(lineage_paths(state, name), 1)
    # a selection of the set shows its orphans; one of another lineage does not
    code, plan = _plan(spec, env, "-l", "ouro/set=grow")
    assert [item["name"] for item in plan["lineages"]] == first_two[:1]  # type: ignore[union-attr]
    assert len(plan["orphaned"]) == 1  # type: ignore[arg-type]
    code, plan = _plan(spec, env, "-l", "alone")
    assert plan["orphaned"] == []


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_a_saved_plan_verify_and_status_work_on_members(
        tmp_path: Path, env: dict[str, str]) -> None:
    spec = tmp_path / "set.yaml"
    spec.write_text(SET.format(replicas=2))
    saved = tmp_path / "plan.json"
    planned = run_ouro("plan", "-o", str(saved), "-l", "ouro/replica=1", str(spec), env=env)
    assert planned.returncode == 2, planned.stderr
    applied = run_ouro("apply", str(saved), env=env)  # reloads the set's file by name
    assert applied.returncode == 0, applied.stderr
    _, plan = _plan(spec, env)
    actions = {item["name"]: item["action"] for item in plan["lineages"]}  # type: ignore[union-attr]
    member = next(name for name in actions if name.endswith("-1"))
    assert actions == {member.removesuffix("-1") + "-0": "create", member: "in-sync",
                       "alone": "create"}
    verified = run_ouro("verify", "--json", str(spec), env=env)
    found = {item["lineage"]: item for item in json.loads(verified.stdout)["lineages"]}
    assert found[member]["status"] == "consistent", verified.stdout
    status = run_ouro("status", "-l", "ouro/set=grow", str(spec), env=env)
    assert status.returncode == 0, status.stderr
    assert f"{member}: 1 generation" in status.stdout


def test_orphans_are_named_as_members_and_unknown_to_the_run() -> None:
    existing = {name: f"/s/{name}" for name in (
        "grow-echo-410cbe-1", "grow-echo-410cbe-0", "grow-0", "grow-x", "grow-up-ab12cd-3",
        "growth-1", "grow-up-7", "other-1")}
    found = find_orphans(["grow", "grow-up", "grow"], {"grow-echo-410cbe-0"}, existing)
    assert found == [Orphan("grow-0", "grow", "/s/grow-0"),
                     Orphan("grow-echo-410cbe-1", "grow", "/s/grow-echo-410cbe-1"),
                     Orphan("grow-up-7", "grow-up", "/s/grow-up-7"),
                     Orphan("grow-up-ab12cd-3", "grow-up", "/s/grow-up-ab12cd-3")]
