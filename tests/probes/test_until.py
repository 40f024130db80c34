"""spec.until: target-reached and plateau stop a lineage; a probe failure never does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.plan.probes import unseen_metrics, until_stop
from reconciler.spec.probes import UntilSpec
from tests.apply.helpers import report, run_ouro, write_spec

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

# The generation a tree belongs to: its journal's entries (one per generation).
GEN = "n=$(grep -c '^## gen' journal.md); printf '{\"n\": %d, \"flat\": 1, \"down\": %d}' " \
      "\"$n\" \"$((10 - n))\""


def spec(specs: Path, name: str, until: str, script: str = GEN, generations: int = 6) -> Path:
    path = write_spec(specs, name, generations)
    path.write_text(path.read_text() + (
        "  probes:\n"
        f"    - {{name: gen, run: [/bin/sh, -c, {json.dumps(script)}], "
        "ceilings: {wall: 20s, cpu: 5s}}\n"
        f"  until:\n    - {until}\n"))
    return path


def test_each_until_kind_stops_and_a_failure_never_does(specs: Path,
                                                        env: dict[str, str]) -> None:
    spec(specs, "target", "{probe: gen, metric: n, at_least: 2}")
    spec(specs, "below", "{probe: gen, metric: down, at_most: 7}")
    spec(specs, "flat", "{probe: gen, metric: flat, plateau: 2}")
    spec(specs, "failing", "{probe: gen, metric: n, at_least: 0}", script="exit 1",
         generations=3)
    spec(specs, "missing", "{probe: gen, metric: nothing, at_least: 0}", generations=2)
    applied = run_ouro("apply", "--yes", "--json", "--parallel", "2", str(specs), env=env)
    assert applied.returncode == 0, applied.stderr
    got = {r["name"]: (r["generations_run"], r["stopped"], r["final_action"])
           for r in report(applied)["lineages"]}
    assert got == {
        "target": (2, "target-reached", "done"),
        "below": (3, "target-reached", "done"),
        "flat": (3, "plateau", "done"),
        "failing": (3, None, "in-sync"),
        "missing": (2, None, "in-sync"),
    }, got
    planned = run_ouro("plan", "--json", str(specs), env=env)
    assert planned.returncode == 0, planned.stdout  # done is nothing to do
    lineages = {item["name"]: item for item in json.loads(planned.stdout)["lineages"]}
    assert lineages["target"]["action"] == "done"
    assert lineages["target"]["until"]["code"] == "target-reached"
    assert lineages["target"]["until"]["generation"] == 2
    assert lineages["flat"]["until"]["code"] == "plateau"
    text = run_ouro("plan", str(specs), env=env).stdout
    assert "done (spec.until)" in text and "target-reached: gen 2 measured gen.n = 2" in text
    status = json.loads(run_ouro("status", "--json", str(specs), env=env).stdout)
    untils = {item["name"]: item["until"] for item in status["lineages"]}
    assert untils["target"]["code"] == "target-reached" and untils["failing"] is None
    assert untils["flat"]["code"] == "plateau"
    shown = run_ouro("status", str(specs), env=env).stdout
    assert "done (plateau)" in shown and "done (target-reached)" in shown
    assert "target: done, 2 of 6 generations; ran 0" in run_ouro(
        "apply", "--yes", str(specs), env=env).stdout  # done: apply runs no more
    # the condition changes: the lineage is extended again
    spec(specs, "target", "{probe: gen, metric: n, at_least: 4}")
    again = run_ouro("plan", "--json", str(specs), env=env)
    assert {i["name"]: i["action"] for i in json.loads(again.stdout)["lineages"]}["target"] \
        == "extend"


def test_a_failure_or_a_non_number_never_satisfies_a_condition() -> None:
    conditions = [UntilSpec(probe="p", metric="m", at_least=0),
                  UntilSpec(probe="p", metric="m", plateau=1)]
    failed = {"d": {1: None, 2: None, 3: None}}
    assert until_stop(conditions, {"p": "d"}, failed, 3) is None
    odd = {"d": {1: {"m": True}, 2: {"m": "9"}, 3: {"x": 1}}}
    assert until_stop(conditions, {"p": "d"}, odd, 3) is None
    # another digest's records are not this probe's
    assert until_stop(conditions, {"p": "new"}, {"d": {1: {"m": 5}}}, 1) is None
    # generations beyond the lineage's are not read
    assert until_stop(conditions[:1], {"p": "d"}, {"d": {4: {"m": 5}}}, 3) is None
    found = until_stop(conditions[1:], {"p": "d"}, {"d": {1: {"m": 5}, 2: None, 3: {"m": 5}}}, 3)
    assert found is not None and (found.code, found.generation) == ("plateau", 3)


def test_a_metric_an_undeclared_probe_never_printed_is_named_in_the_plan(
        specs: Path, env: dict[str, str]) -> None:
    """A typo in an until metric can never be met: once the probe (which declares no
    metrics) has measured UNSEEN_AFTER generations without printing it, plan says so."""
    spec(specs, "typo", "{probe: gen, metric: nn, at_least: 2}", generations=3)
    applied = run_ouro("apply", "--yes", str(specs), env=env)
    assert applied.returncode == 0, applied.stderr
    planned = run_ouro("plan", str(specs), env=env)
    assert "probe gen has measured" in planned.stdout, planned.stdout
    assert "never printed 'nn' (it printed: down, flat, n)" in planned.stdout
    # the same metric, declared: validate refuses it instead (tests/probes/test_declared_metrics)


def test_unseen_metrics_waits_for_enough_generations_and_skips_a_declared_probe() -> None:
    conditions = [UntilSpec(probe="p", metric="m", at_least=1)]
    printed = {"d": {1: {"x": 1}, 2: None, 3: {"x": 2}, 4: {"x": 3}}}
    assert unseen_metrics(conditions, {"p": None}, {"p": "d"}, printed) == [
        "spec.until: probe p has measured 3 generations and never printed 'm' (it printed: "
        "x); a typo? Declare the probe's metrics (metrics: [...]) to have until checked at "
        "validate"]
    assert unseen_metrics(conditions, {"p": ["m"]}, {"p": "d"}, printed) == []  # declared
    fewer = {"d": {1: {"x": 1}, 2: None, 3: {"x": 2}}}  # a failure is no measurement
    assert unseen_metrics(conditions, {"p": None}, {"p": "d"}, fewer) == []
    seen = {"d": {1: {"x": 1}, 2: {"m": 0}, 3: {"x": 2}}}
    assert unseen_metrics(conditions, {"p": None}, {"p": "d"}, seen) == []
