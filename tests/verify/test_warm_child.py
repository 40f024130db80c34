"""The audit child started ahead of its job (``engine.audits.WarmChild``): the next audit
uses it (one child, no second spawn), it had imported the audit before the job came, and
no spare outlives the apply's audits."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from reconciler.engine.audits import WarmChild
from reconciler.engine.verify import Child, spawn_child, start_background_audit
from tests.verify.builder import Lineage
from tests.verify.test_audit import overspend, sound
from tests.verify.test_child import _gone

GATE = 60.0


class Counting:
    """The real spawn step, counted."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def __call__(self, argv: list[str], env: Mapping[str, str]) -> Child:
        child = spawn_child(argv, env)
        self.children.append(child)
        return child


def _pid(child: Child) -> int:
    return child.process.pid  # type: ignore[attr-defined, no-any-return]


def _imported(pid: int) -> bool:
    """Has the waiting child loaded the audit (libgit2 mapped in)?"""
    try:
        return "pygit2" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_the_audit_uses_the_child_started_before_its_job(tmp_path: Path) -> None:
    damaged = sound(tmp_path / "lineages", "damaged")
    overspend(damaged)
    spawn = Counting()
    children = WarmChild(spawn)
    children.warm()
    assert len(spawn.children) == 1
    spare = _pid(spawn.children[0])
    deadline = time.monotonic() + GATE
    while not _imported(spare) and time.monotonic() < deadline:  # it waits, audit loaded
        time.sleep(0.05)
    assert _imported(spare) and not _gone(spare)
    handle = start_background_audit([("damaged", damaged.paths)], spawn=children.handout())
    result = handle.result(GATE)
    assert (result.outcome, result.status) == ("completed", "findings")
    assert [f.code for f in result.lineages[0].findings] == ["overspend"]
    assert len(spawn.children) == 1  # the spare did the audit: nothing else was spawned
    children.close()
    assert _gone(spare)


def test_a_spare_never_used_is_ended_by_close(tmp_path: Path) -> None:
    spawn = Counting()
    children = WarmChild(spawn)
    children.warm()
    children.warm()  # one spare at most
    assert len(spawn.children) == 1
    children.close()
    assert _gone(_pid(spawn.children[0]))


def test_a_spare_handed_to_an_audit_stopped_before_it_ran_is_ended(tmp_path: Path) -> None:
    lineage = Lineage.create(tmp_path / "lineages", "quiet")
    lineage.no_change()
    spawn = Counting()
    children = WarmChild(spawn)
    children.warm()
    handout = children.handout()
    children.close()  # nothing had taken it yet: it ends now
    assert _gone(_pid(spawn.children[0]))
    # the audit that was to use it spawns its own and still completes
    result = start_background_audit([("quiet", lineage.paths)], spawn=handout).result(GATE)
    assert (result.outcome, result.status) == ("completed", "consistent")
    assert len(spawn.children) == 2
