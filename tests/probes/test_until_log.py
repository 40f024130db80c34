"""`ouro log` shows a spec.until stop as `ouro status` does (text and JSON, with --specs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apply.helpers import run_ouro
from tests.probes.test_until import spec

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


def test_log_shows_the_until_stop_as_status_does(specs: Path, env: dict[str, str]) -> None:
    spec(specs, "target", "{probe: gen, metric: n, at_least: 2}", generations=4)
    spec(specs, "flat", "{probe: gen, metric: flat, plateau: 2}", generations=5)
    # at its target when the condition first holds: complete, not stopped (as status says)
    spec(specs, "whole", "{probe: gen, metric: n, at_least: 2}", generations=2)
    applied = run_ouro("apply", "--yes", "--parallel", "2", str(specs), env=env)
    assert applied.returncode == 0, applied.stderr
    names = ["target", "flat", "whole"]
    logged = run_ouro("log", "--json", "--specs", str(specs), *names, env=env)
    assert logged.returncode == 0, logged.stderr
    untils = {item["name"]: item["until"] for item in json.loads(logged.stdout)["lineages"]}
    assert untils["target"] == {
        "code": "target-reached", "generation": 2,
        "message": "gen 2 measured gen.n = 2, at least 2 (spec.until)"}
    assert untils["flat"] is not None
    assert (untils["flat"]["code"], untils["flat"]["generation"]) == ("plateau", 3)
    assert untils["whole"] is None
    status = json.loads(run_ouro("status", "--json", str(specs), env=env).stdout)
    assert untils == {item["name"]: item["until"] for item in status["lineages"]}
    text = run_ouro("log", "--specs", str(specs), *names, env=env).stdout
    assert "  done (target-reached): gen 2 measured gen.n = 2, at least 2 (spec.until)\n" \
        in text
    assert text.count("done (plateau): gen.flat has had no new best in 2") == 1
    assert text.count("done (") == 2  # not "whole", at its target
    # without --specs there is no spec to read a condition from: no stop, as in status
    bare = json.loads(run_ouro("log", "--json", "target", env=env).stdout)
    assert bare["lineages"][0]["until"] is None
    assert "done (" not in run_ouro("log", "target", env=env).stdout
