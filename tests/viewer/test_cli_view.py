"""`ouro view`'s edges: missing libraries, a busy port, a bad spec: clear errors."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest

from tests.inprocess import ouro


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        *args: str) -> tuple[int, str]:
    code, _out, err = ouro(monkeypatch, capsys, *args)
    return code, err


def test_missing_libraries_name_the_extra(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("uvicorn", "matplotlib")
                        else real(name, *a))
    code, err = run(monkeypatch, capsys, "view")
    assert code == 1
    assert "needs uvicorn, matplotlib" in err
    assert "pip install -c constraints.txt -e '.[view]'" in err
    assert "pip install 'ouro-lineages[view]'" in err  # never `ouro`: another project's name


def test_a_busy_port_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code, err = run(monkeypatch, capsys, "view", "--host", "127.0.0.1", "--port", str(port))
    assert code == 1 and f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err


def test_a_bad_spec_is_reported_before_serving(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: x}\nspec: {}\n")
    code, err = run(monkeypatch, capsys, "view", str(bad))
    assert code == 1 and "bad.yaml:" in err and "Traceback" not in err
