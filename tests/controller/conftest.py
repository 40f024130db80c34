"""Fixtures of the controller tests: a spec repository, the state dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.controller.harness import SpecRepo


@pytest.fixture
def spec_repo(tmp_path: Path) -> SpecRepo:
    return SpecRepo(tmp_path)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"
