"""The codebase's own bar, run with the tests: ruff clean, mypy --strict clean."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> list[str]:
    if importlib.util.find_spec(name) is None:  # the tool in THIS interpreter, not on PATH
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return [sys.executable, "-m", name]


def test_ruff_is_clean() -> None:
    done = subprocess.run([*_tool("ruff"), "check", "reconciler", "tests", "bench"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_is_clean() -> None:
    done = subprocess.run([*_tool("mypy"), "--strict", "reconciler"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
