"""Under CI a missing host facility fails the test; elsewhere it skips it."""

from __future__ import annotations

import pytest

from tests.host import require


def test_require_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must provide this: bwrap"):
        require(False, "bwrap")


def test_require_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="bwrap"):
        require(False, "bwrap")
    require(True, "never raised when the host has it")
