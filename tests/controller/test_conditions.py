"""Conditions: derived and carried over as Kubernetes keeps them, written atomically in the
state dir, read by `ouro status` (text, --json) and `ouro view` (stalled lineages first)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from reconciler.engine.controller import conditions
from reconciler.engine.controller.conditions import LineageView
from reconciler.state.conditions import read_status, status_path
from reconciler.viewer.app import FleetSource, Shown, create_app
from tests.apply.helpers import run_ouro
from tests.observe.builder import LineageBuilder

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOKEN = "t0ken-for-tests"
OWN = {"repo": "/srv/specs.git", "branch": "main", "revision": "a" * 40, "seen": "b" * 40,
       "bad_commit": {"commit": "b" * 40, "message": "specs/x.yaml:6:3: spec.generations: "
                      "not an integer", "at": "2026-01-01T00:00:00+00:00"},
       "last_error": None, "budget": None, "pid": 1, "host": "h"}


def _views(state: Path) -> None:
    calm = conditions.derive(LineageView("calm", "in-sync", "", 2, 2), None)
    stuck = conditions.derive(LineageView(
        "stuck", "extend", "", 1, 5, stalled_reason="provider-unavailable",
        stalled_message="the provider does not answer"), None)
    conditions.write(state, OWN, {"calm": calm, "stuck": stuck})


def _status(found: list[dict[str, str]], kind: str) -> dict[str, str]:
    return next(c for c in found if c["type"] == kind)


def _at(found: conditions.LineageConditions, kind: str) -> conditions.Condition:
    condition = found.get(kind)
    assert condition is not None, kind
    return condition


def _forged(found: conditions.LineageConditions, at: str) -> conditions.LineageConditions:
    return conditions.LineageConditions("x", tuple(
        conditions.Condition(c.type, c.status, c.reason, c.message, at)
        for c in found.conditions))


def test_a_transition_time_changes_only_with_the_status() -> None:
    """(The table of every transition, with a fake clock: tests/controller/test_transitions.)"""
    old = "2000-01-01T00:00:00+00:00"
    forged = _forged(conditions.derive(LineageView("x", "extend", "", 1, 3), None), old)
    outage = _forged(conditions.derive(LineageView(
        "x", "extend", "", 1, 3, stalled_reason="provider-unavailable"), None), old)
    reason_only = conditions.derive(LineageView("x", "extend", "", 1, 3,
                                                stalled_reason="error"), outage)
    assert (_at(reason_only, "Stalled").status, _at(reason_only, "Stalled").reason) == (
        "True", "error")
    assert _at(reason_only, "Stalled").last_transition == old  # the reason alone moved
    assert _at(reason_only, "Progressing").last_transition == old
    kept = conditions.derive(LineageView("x", "extend", "", 2, 3), forged)
    moved = conditions.derive(LineageView("x", "in-sync", "", 3, 3), forged)
    assert _at(kept, "Ready").last_transition == old
    assert _at(kept, "Progressing").last_transition == old
    assert (_at(moved, "Ready").status, _at(moved, "Ready").reason) == ("True", "in-sync")
    assert _at(moved, "Ready").last_transition != old
    assert _at(moved, "Progressing").status == "False"
    assert _at(moved, "Stalled").last_transition == old  # still False: unchanged


def test_status_shows_the_controller_and_each_lineages_conditions(tmp_path: Path,
                                                                   env: dict[str, str]) -> None:
    state = tmp_path / "state"
    for name in ("calm", "stuck"):
        LineageBuilder(state, name).gen("changed")
    _views(state)
    assert status_path(state).stat().st_mode & 0o777 == 0o600
    text = run_ouro("status", "--state-dir", str(state), env=env)
    assert text.returncode == 0, text.stderr
    assert f"controller: revision {'a' * 12} of /srv/specs.git main (not running" in text.stdout
    assert "bad commit bbbbbbbbbbbb, not applied: specs/x.yaml:6:3" in text.stdout
    assert "conditions: Ready=False (extend), Progressing=False (provider-unavailable), " \
           "Stalled=True (provider-unavailable)" in text.stdout
    assert "the provider does not answer" in text.stdout
    document = json.loads(run_ouro("status", "--json", "--state-dir", str(state),
                                   env=env).stdout)
    assert document["controller"]["revision"] == "a" * 40
    assert document["controller"]["running"] is False
    found = {line["name"]: line["conditions"] for line in document["lineages"]}
    assert _status(found["calm"], "Ready")["status"] == "True"
    assert _status(found["stuck"], "Stalled") == {
        **_status(found["stuck"], "Stalled"), "status": "True",
        "reason": "provider-unavailable"}


def test_status_without_a_controller_says_null(tmp_path: Path, env: dict[str, str]) -> None:
    state = tmp_path / "state"
    LineageBuilder(state, "calm").gen("changed")
    document = json.loads(run_ouro("status", "--json", "--state-dir", str(state),
                                   env=env).stdout)
    assert document["controller"] is None
    assert document["lineages"][0]["conditions"] is None
    status_path(state).parent.mkdir(mode=0o700)
    status_path(state).write_text("{not json")  # a damaged cache reads as none
    assert read_status(state) is None


def test_the_fleet_page_shows_the_revision_and_stalled_lineages_first(tmp_path: Path) -> None:
    state = tmp_path / "state"
    calm, stuck = LineageBuilder(state, "calm"), LineageBuilder(state, "stuck")
    calm.gen("changed")
    stuck.gen("changed")
    _views(state)
    source = FleetSource(lambda: {"calm": Shown(calm.paths, 2), "stuck": Shown(stuck.paths, 5)},
                         fixed=True)
    source.cache_dir, source.state_dir = tmp_path / "cache", state
    client = TestClient(create_app(source, TOKEN), base_url="http://127.0.0.1")
    page = client.get(f"/?token={TOKEN}").text
    assert f'<code class="revision">{"a" * 12}</code>' in page
    assert "bad commit, not applied" in page
    assert "stalled: provider-unavailable: the provider does not answer" in page
    assert page.index("/lineage/stuck") < page.index("/lineage/calm")
