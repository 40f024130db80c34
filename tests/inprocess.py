"""``ouro`` run in the test's own process (its exit code, stdout and stderr): for tests
that monkeypatch what the command reads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from reconciler.cli import main


def ouro(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         *args: str | Path) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ouro", *map(str, args)])
    code = 0
    try:
        main()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
