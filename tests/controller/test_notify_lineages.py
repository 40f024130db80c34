"""The controller's notifications about a lineage's own course, over real lives: a death
streak (three generations dead in a row) and a target reached (a probe's `until`)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.apply.helpers import UNASKED
from tests.controller.harness import Hook, Running, SpecRepo, spec_text

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

# Grows by a comment while the journal has fewer than 2 entries, then dies on every life.
# A death restores the nearest older body that differs (docs/lineage-contract.md): this
# body and its grown copy, both lethal from gen 3 on, so every life from gen 3 dies.
MORTAL = """\
;;; organism.el --- grows once, then dies  -*- lexical-binding: t; -*-
(let ((seen (with-temp-buffer
              (insert-file-contents "/kernel/journal.md")
              (count-matches "^## gen " (point-min) (point-max)))))
  (when (>= seen 2)
    (kill-emacs 3))
  (with-temp-buffer
    (insert-file-contents "/work/organism.el")
    (goto-char (point-max))
    (insert ";; grown\\n")
    (write-region nil nil "/work/organism.el")))
"""
# Appends (defun gN () N) to itself, N the journal's entries so far.
COUNTING = """\
;;; organism.el --- counts its lives  -*- lexical-binding: t; -*-
(let ((seen (with-temp-buffer
              (insert-file-contents "/kernel/journal.md")
              (count-matches "^## gen " (point-min) (point-max))))
      (file "/work/organism.el"))
  (with-temp-buffer
    (insert-file-contents file)
    (goto-char (point-max))
    (insert (format "(defun g%d () %d)\\n" seen seen))
    (write-region nil nil file)))
"""
DEFUNS = "printf '{\"defuns\": %d}' \"$(grep -c '^(defun g' organism.el)\"\n"


def _replay(spec_repo: SpecRepo, folder: str, bodies: list[str]) -> None:
    replies = spec_repo.work / "specs" / folder
    replies.mkdir(parents=True)
    for index, body in enumerate(bodies, start=1):
        (replies / f"{index:04d}.el").write_text(body)


def _replaying(name: str, generations: int, folder: str, tail: str = "") -> str:
    return spec_text(name, generations, provider="replay", extra=f"replay: {folder}") + tail


def test_a_death_streak_and_a_target_reached_are_notified_once_each(
        spec_repo: SpecRepo, state: Path, env: dict[str, str]) -> None:
    hook = Hook()
    _replay(spec_repo, "mortal-replies", [MORTAL, UNASKED])
    _replay(spec_repo, "grows-replies", [COUNTING, UNASKED])
    probe = spec_repo.work / "specs" / "probes" / "defuns"
    probe.mkdir(parents=True)
    (probe / "defuns.sh").write_text(DEFUNS)
    measured = (
        "  probes:\n"
        "    - {name: defuns, run: [/bin/sh, /probe/defuns.sh], files: probes/defuns,\n"
        "       ceilings: {wall: 20s, cpu: 5s, memory: 256MiB}}\n"
        "  until:\n    - {probe: defuns, metric: defuns, at_least: 1}\n")
    spec_repo.commit("two lineages", {
        "mortal.yaml": _replaying("mortal", 6, "mortal-replies"),
        "grows.yaml": _replaying("grows", 6, "grows-replies", measured),
    })
    running = Running(spec_repo.bare, state, "--notify", hook.url, env=env)
    try:
        running.wait(lambda: {"death-streak", "target-reached"} <= set(hook.events()),
                     "the death streak and the target", timeout=240)
        running.wait(lambda: running.lineage("mortal").get("generations") == 6,
                     "mortal's six generations", timeout=240)
    finally:
        assert running.stop() == 0, running.output()
        hook.close()
    # once each: neither the streak at gen 6 nor the target at every later pass again
    assert sorted(hook.events()) == ["death-streak", "target-reached"], hook.events()
    by_event = {item["event"]: item for item in hook.received}
    streak = by_event["death-streak"]
    assert (streak["lineage"], streak["generation"], streak["streak"]) == ("mortal", 5, 3)
    assert "mortal: 3 generations died in a row" in streak["text"]
    reached = by_event["target-reached"]
    assert reached["lineage"] == "grows" and reached["reason"] == "target-reached", reached
    assert reached["generation"] == 2 and "grows stopped after gen 2" in reached["text"]
    # (a goal is not reported as a stop: no lineage-stopped above)


def test_a_death_streak_across_a_restart_is_counted_from_the_repositories(
        spec_repo: SpecRepo, state: Path, env: dict[str, str]) -> None:
    """Two deaths (gens 3 and 4) under one controller, the third (gen 5) under the next:
    the streak is read back from the observations, so it is notified at gen 5 and only
    there (not at 7, as a count kept in memory would)."""
    _replay(spec_repo, "mortal-replies", [MORTAL, UNASKED])
    spec_repo.commit("four generations", {"mortal.yaml": _replaying("mortal", 4, "mortal-replies")})
    first = Hook()
    running = Running(spec_repo.bare, state, "--notify", first.url, env=env)
    try:
        running.wait(lambda: running.lineage("mortal").get("generations") == 4,
                     "mortal's four generations", timeout=240)
    finally:
        assert running.stop() == 0, running.output()
        first.close()
    assert "death-streak" not in first.events()  # two deaths in a row: not yet a streak
    spec_repo.commit("six generations", {"mortal.yaml": _replaying("mortal", 6, "mortal-replies")})
    second = Hook()
    running = Running(spec_repo.bare, state, "--notify", second.url, env=env)
    try:
        running.wait(lambda: running.lineage("mortal").get("generations") == 6,
                     "mortal's six generations", timeout=240)
        running.wait(lambda: "death-streak" in second.events(), "the death streak", timeout=30)
    finally:
        assert running.stop() == 0, running.output()
        second.close()
    streaks = [item for item in second.received if item["event"] == "death-streak"]
    assert [(item["generation"], item["streak"]) for item in streaks] == [(5, 3)], streaks


def test_a_lineage_done_because_its_spec_changed_is_notified(
        spec_repo: SpecRepo, state: Path, env: dict[str, str]) -> None:
    """Two generations measured under an `until` that never holds; then the spec lowers
    it to one that the measurements already meet: the plan says done, no generation
    runs (so no engine event), and the controller still says target-reached, once."""
    hook = Hook()
    _replay(spec_repo, "grows-replies", [COUNTING, UNASKED])
    probe = spec_repo.work / "specs" / "probes" / "defuns"
    probe.mkdir(parents=True)
    (probe / "defuns.sh").write_text(DEFUNS)

    def measured(at_least: int, generations: int) -> str:
        return _replaying("grows", generations, "grows-replies", (
            "  probes:\n"
            "    - {name: defuns, run: [/bin/sh, /probe/defuns.sh], files: probes/defuns,\n"
            "       ceilings: {wall: 20s, cpu: 5s, memory: 256MiB}}\n"
            f"  until:\n    - {{probe: defuns, metric: defuns, at_least: {at_least}}}\n"))

    spec_repo.commit("two generations", {"grows.yaml": measured(100, 2)})
    running = Running(spec_repo.bare, state, "--notify", hook.url, env=env)
    try:
        running.wait(lambda: running.condition("grows", "Ready").get("reason") == "in-sync",
                     "grows's two generations", timeout=240)
        spec_repo.commit("a target already met", {"grows.yaml": measured(1, 6)})
        running.wait(lambda: "target-reached" in hook.events(), "the target", timeout=60)
        running.wait(lambda: running.condition("grows", "Ready").get("reason") == "done",
                     "grows done")
        time.sleep(5)  # more passes: not said again
    finally:
        assert running.stop() == 0, running.output()
        hook.close()
    assert hook.events() == ["target-reached"], hook.events()
    (reached,) = hook.received
    assert (reached["lineage"], reached["reason"], reached["spec_changed"]) == (
        "grows", "target-reached", True), reached
    assert reached["generation"] == 2 and "since its spec changed" in reached["text"]
    assert running.lineage("grows").get("generations") == 2  # none ran
