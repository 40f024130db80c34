"""What observe touches, watched: the repositories it opens, and whether it reads them at
all (its full read, ``state.observe._observe``, made to fail)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.state import observe as observe_module
from reconciler.state import repos
from reconciler.state.observed import Observed


def count_opens(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every repository ``repos.open_repo`` opens from now on, in order."""
    opened: list[Path] = []
    real = repos.open_repo

    def counting(path: Path, *, bare: bool = False) -> repos.Repo | None:
        opened.append(Path(path))
        return real(path, bare=bare)

    monkeypatch.setattr(repos, "open_repo", counting)
    return opened


def no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, observe reading a lineage's repositories fails the test."""
    def refuse(*args: object) -> Observed:
        raise AssertionError("observe read the repositories")

    monkeypatch.setattr(observe_module, "_observe", refuse)
