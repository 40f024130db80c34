"""Fixtures of the observe tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A private state dir's summaries folder (not made yet: the first record makes it)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    return state / ".summaries"
