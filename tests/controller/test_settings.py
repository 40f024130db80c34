"""SIGHUP re-reads --settings FILE: a changed webhook is the one the next transition goes to.
A bad settings file is a clear error naming the file and the key."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tests.apply.helpers import run_ouro
from tests.controller.harness import Hook, Running, SpecRepo, spec_text


def test_sighup_rereads_the_settings(spec_repo: SpecRepo, state: Path, env: dict[str, str],
                                     tmp_path: Path) -> None:
    first, second = Hook(), Hook()
    settings = tmp_path / "controller.yaml"
    settings.write_text(f"notify: {first.url}\ninterval: 1s\n")
    spec_repo.commit("empty", {"alpha.yaml": spec_text("alpha", 0)})
    running = Running(spec_repo.bare, state, "--settings", str(settings), env=env)
    try:
        running.wait(lambda: running.status().get("controller", {}).get("revision"), "started")
        spec_repo.commit("bad 1", {"bad.yaml": "kind: [\n"})
        running.wait(lambda: first.events() == ["bad-commit"], "the first hook")
        settings.write_text(f"notify: {second.url}\ninterval: 1s\n")
        running.process.send_signal(signal.SIGHUP)
        running.wait(lambda: "settings re-read" in running.output(), "the re-read")
        spec_repo.commit("bad 2", {"bad.yaml": "kind: ]\n"})
        running.wait(lambda: second.events() == ["bad-commit"], "the second hook")
    finally:
        assert running.stop() == 0, running.output()
        first.close()
        second.close()
    assert first.events() == ["bad-commit"]


def test_a_bad_settings_file_names_the_key(tmp_path: Path, env: dict[str, str]) -> None:
    settings = tmp_path / "controller.yaml"
    settings.write_text("repo: /nowhere\nintervall: 5s\n")
    done = run_ouro("controller", "--settings", str(settings), env=env)
    assert done.returncode == 1
    assert f"--settings {settings}: unknown option intervall" in done.stderr
    assert "(known: repo, branch" in done.stderr
    missing = run_ouro("controller", env=env)
    assert missing.returncode == 2 and "--repo" in missing.stderr
    slurm = run_ouro("controller", "--repo", "/nowhere", "--executor", "slurm",
                     "--max-spend-per-day", "5", env=env)
    assert slurm.returncode == 2 and "--max-spend-per-day admits each generation" in slurm.stderr


def _failed_since(running: Running, at: str) -> dict[str, Any] | None:
    """The controller's error if a pass failed after the one at ``at``."""
    error = running.status().get("controller", {}).get("last_error")
    return error if isinstance(error, dict) and error.get("at") != at else None


def test_an_unreachable_repository_is_a_controller_error_said_once(
        spec_repo: SpecRepo, state: Path, env: dict[str, str], tmp_path: Path) -> None:
    hook = Hook()
    spec_repo.commit("empty", {"alpha.yaml": spec_text("alpha", 0)})
    running = Running(spec_repo.bare, state, "--notify", hook.url, env=env)
    moved = tmp_path / "moved.git"
    try:
        running.wait(lambda: running.status().get("controller", {}).get("revision"), "started")
        spec_repo.bare.rename(moved)
        error = running.wait(lambda: running.status()["controller"].get("last_error"),
                             "the fetch error")
        assert "cannot fetch" in error["message"] and "last good revision" in error["message"]
        running.wait(lambda: hook.events() == ["controller-error"], "its notification")
        # two more passes fail the same way (the time of the error moves at each)
        first = error["at"]
        second = running.wait(lambda: _failed_since(running, first), "a second failed pass")
        running.wait(lambda: _failed_since(running, second["at"]), "a third failed pass")
        moved.rename(spec_repo.bare)
        running.wait(lambda: running.status()["controller"].get("last_error") is None,
                     "the error cleared")
    finally:
        assert running.stop() == 0, running.output()
        hook.close()
    # said once, not at every interval (stopping delivered whatever was queued)
    assert hook.events() == ["controller-error"]
