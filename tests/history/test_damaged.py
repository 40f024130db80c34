"""History commands over damaged lineages: a clear message or a reported problem, never a
traceback, and nothing written to the lineage."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.inprocess import ouro
from tests.observe.builder import LineageBuilder

run = ouro


def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    return state


def test_objects_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    state = _state(tmp_path, monkeypatch)
    builder = LineageBuilder(state, "broken")
    builder.gen("changed")
    builder.gen("died")
    shutil.rmtree(builder.paths.git_dir / "objects")
    (builder.paths.git_dir / "objects").mkdir()
    code, out, err = run(monkeypatch, capsys, "log", "broken")
    assert code == 0 and "problem: lineage broken: its repositories cannot be read" in out
    code, out, err = run(monkeypatch, capsys, "show", "broken", "1")
    assert code == 1 and "has no generation 1 (it has none yet: lineage broken" in err
    code, out, err = run(monkeypatch, capsys, "export", "broken")
    assert code == 0 and out.startswith("lineage,generation,") and "cannot be read" in err
    assert "Traceback" not in out + err


def test_observations_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    """Without its observation repository a lineage still has rows: unknown numbers."""
    state = _state(tmp_path, monkeypatch)
    builder = LineageBuilder(state, "blind")
    builder.gen("changed")
    builder.gen("no-change")
    shutil.move(builder.paths.observations, tmp_path / "elsewhere")
    (builder.paths.observations).mkdir()  # still found in the state dir, now empty
    code, out, _err = run(monkeypatch, capsys, "log", "blind", "--json")
    assert code == 0 and '"observed": false' in out and '"generation": 2' in out
    code, out, _err = run(monkeypatch, capsys, "show", "blind", "2")
    assert code == 0 and "[no observation]" in out and "## journal entry" in out


def test_an_unreadable_observation_is_a_problem(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    state = _state(tmp_path, monkeypatch)
    builder = LineageBuilder(state, "garbled")
    commit = builder.gen("changed", observe=False)
    builder._observe({"generations/0001.json": b"\xff{not json"}, f"observe: gen 1 {commit}")
    code, out, _err = run(monkeypatch, capsys, "log", "garbled")
    assert code == 0 and "problem: generations/0001.json is unreadable" in out
    assert "[no observation]" in out
