"""The cyclic collector is paused while a brief read-only command runs (plan, status,
validate: bench/set_bench.py measures what it saves), never for apply, and is running
again when ``main`` returns, however the command ended."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.engine.fleet import Fleet
from reconciler.spec import load
from tests.inprocess import ouro


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    assert gc.isenabled()
    yield
    gc.enable()


def _spy(monkeypatch: pytest.MonkeyPatch, target: object, name: str) -> list[bool]:
    """Record whether the collector runs when ``target.name`` is called (it then fails)."""
    seen: list[bool] = []

    def record(*args: object, **kwargs: object) -> None:
        seen.append(gc.isenabled())
        raise RuntimeError("stop here")

    monkeypatch.setattr(target, name, record)
    return seen


@pytest.mark.parametrize("command", ["plan", "status"])
def test_a_brief_command_runs_without_the_collector(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        command: str) -> None:
    seen = _spy(monkeypatch, Fleet, "plan_paths" if command == "plan" else "status")
    code, _, err = ouro(monkeypatch, capsys, command, tmp_path, "--state-dir", tmp_path / "s")
    assert seen == [False] and code == 1 and "RuntimeError: stop here" in err
    assert gc.isenabled()  # on again, though the command failed


def test_validate_runs_without_the_collector(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    seen = _spy(monkeypatch, load, "load_specs")
    ouro(monkeypatch, capsys, "validate", tmp_path)
    assert seen == [False] and gc.isenabled()


def test_apply_keeps_the_collector(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    seen = _spy(monkeypatch, Fleet, "load")  # apply runs for hours: cycles must be collected
    ouro(monkeypatch, capsys, "apply", tmp_path, "--state-dir", tmp_path / "s", "--yes")
    assert seen == [True] and gc.isenabled()


def test_a_collector_the_caller_paused_stays_paused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    gc.disable()
    ouro(monkeypatch, capsys, "validate", tmp_path)
    assert not gc.isenabled()
