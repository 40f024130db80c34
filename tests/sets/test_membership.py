"""A set member never takes over a lineage born outside its set (issue 36, item 7): a
plain Lineage ``evo-0`` applied, then a LineageSet ``evo`` whose member is named
``evo-0``: plan refuses the member (``set-membership``) naming the remedy, and apply
runs nothing of it; the set's own members go on as ever."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.plan.membership import membership_refusal
from tests.apply.helpers import run_ouro, write_spec

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

SET = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {{name: {name}}}
spec:
  replicas: 1
  template:
    generations: {generations}
    model: {{provider: echo}}
    ceilings: {{wall: 60s, cpu: 30s, memory: 512MiB}}
"""


def _generations(env: dict[str, str], name: str) -> int:
    logged = json.loads(run_ouro("log", name, "--json", env=env).stdout)
    return len([row for row in logged["lineages"][0]["rows"]
                if row["generation"] > 0])  # row 0 is the seed, no generation


def test_a_member_does_not_take_over_a_plain_lineage_of_its_name(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    plain = write_spec(specs, "evo-0", 1)
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    plain.unlink()
    (specs / "evo.yaml").write_text(SET.format(name="evo", generations=3))

    planned = run_ouro("plan", "--json", str(specs), env=env)
    assert planned.returncode == 1, planned.stdout
    [item] = json.loads(planned.stdout)["lineages"]
    assert (item["action"], item["reason"]) == ("refuse", "set-membership"), item
    assert "ran as a plain Lineage" in item["message"] and "rename the set" in item["message"]
    assert "set-membership" in run_ouro("plan", str(specs), env=env).stdout
    applied = run_ouro("apply", "--yes", str(specs), env=env)
    assert applied.returncode != 0
    assert _generations(env, "evo-0") == 1  # nothing ran


def test_a_member_goes_on_with_its_own_lineage(specs: Path, env: dict[str, str]) -> None:
    (specs / "evo.yaml").write_text(SET.format(name="evo", generations=1))
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    (specs / "evo.yaml").write_text(SET.format(name="evo", generations=2))
    planned = run_ouro("plan", "--json", str(specs), env=env)
    [item] = json.loads(planned.stdout)["lineages"]
    assert item["action"] == "extend", item
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    assert _generations(env, "evo-0") == 2


def test_the_recorded_set_decides() -> None:
    def seen(recorded: object) -> dict[str, object]:
        return {"ran_with": {"kernel": {}, "set": recorded}}

    assert membership_refusal("evo-0", "evo", seen("evo")) is None
    assert membership_refusal("evo-0", None, seen("other")) is None  # no member: not here
    assert membership_refusal("evo-0", "evo", {"ran_with": {"kernel": {}}}) is None  # older
    assert membership_refusal("evo-0", "evo", None) is None  # nothing observed
    other = membership_refusal("evo-0", "evo", seen("other"))
    assert other is not None and other[0] == "set-membership" and "in set 'other'" in other[1]
    plain = membership_refusal("evo-0", "evo", seen(None))
    assert plain is not None and "as a plain Lineage" in plain[1]
