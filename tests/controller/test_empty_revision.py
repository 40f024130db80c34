"""A commit that deletes every spec is a revision, not a bad commit (issue 36, item 6): the
controller applies it, every lineage is orphaned (no new generation, its condition says
so) and one notification says why -- the previous revision is never kept running."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.apply.helpers import run_ouro
from tests.controller.harness import Running, SpecRepo, spec_text

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]


def _generations(env: dict[str, str]) -> int:
    logged = run_ouro("log", "a", "--json", env=env)
    assert logged.returncode == 0, logged.stderr
    [lineage] = json.loads(logged.stdout)["lineages"]
    return len([row for row in lineage["rows"] if row["generation"] > 0])  # row 0: the seed


def test_deleting_every_spec_orphans_every_lineage(spec_repo: SpecRepo, state: Path,
                                                   env: dict[str, str],
                                                   tmp_path: Path) -> None:
    # a lineage with generations: 8, applied to 3
    local = tmp_path / "local"
    local.mkdir()
    (local / "a.yaml").write_text(spec_text("a", 3))
    env = {**env, "OURO_STATE_DIR": str(state)}
    applied = run_ouro("apply", "--yes", str(local), env=env)
    assert applied.returncode == 0, applied.stderr
    assert _generations(env) == 3
    spec_repo.commit("a asks for 8", {"a.yaml": spec_text("a", 8)})
    deleted = spec_repo.commit("delete every spec", {"a.yaml": None})
    received = tmp_path / "received.jsonl"
    running = Running(spec_repo.bare, state, "--notify-command", f"cat >> {received}",
                      interval="1s", env=env)
    try:
        running.wait(lambda: running.status().get("controller", {}).get("revision") == deleted,
                     "the empty revision applied")
        running.wait(lambda: running.condition("a", "Ready").get("reason") == "orphaned",
                     "a orphaned")
        time.sleep(5)  # five more intervals: the lineage never grows
        controller = running.status()["controller"]
        assert controller["bad_commit"] is None, controller
    finally:
        assert running.stop() == 0, running.output()
    assert _generations(env) == 3, running.output()
    assert running.lineage("a")["orphaned"] is True
    sent = [json.loads(line) for line in received.read_text().splitlines()]
    assert [item["event"] for item in sent] == ["no-specs"], sent
    assert sent[0]["commit"] == deleted and "orphaned" in sent[0]["text"]
    assert "bad commit" not in running.output(), running.output()
