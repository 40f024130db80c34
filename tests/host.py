"""What a test may ask of the host, and what happens when the host lacks it."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

Children = Callable[[], set[int]]  # the ``new_children`` fixture (tests/conftest.py)


def require(condition: bool, reason: str) -> None:
    """A test that needs something of the host: under CI its absence is a failure (CI
    must run every sandbox and cgroup test); elsewhere the test is skipped."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


def alive(pid: int) -> bool:
    """Does process ``pid`` run (a zombie, exited but not reaped, does not)?"""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
