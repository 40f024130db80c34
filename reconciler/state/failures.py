"""What apply and the controller read of a lineage's newest observations before it runs
more. Read-only.

Rule: never raises: an observation that cannot be read counts as no failure (the
provider's probe still guards), as the end of a death streak and as an unknown replay
cursor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import LineagePaths
from reconciler.kernel.base.failures import failed_every_call
from reconciler.state.repos import READ_ERRORS, Lineage

__all__ = ["died_streak", "failed_streak", "replay_cursor"]


def failed_streak(paths: LineagePaths, newest: int, limit: int) -> int:
    """How many of the generations up to ``newest`` (at most ``limit``), counting back,
    had every model call fail (their observations' ``provider_failure``). Never raises:
    unreadable history counts as no failures (the provider's probe still guards)."""
    return _streak(paths, newest, limit, _failed_every_call)


def died_streak(paths: LineagePaths, newest: int, limit: int) -> int:
    """How many of the generations up to ``newest`` (at most ``limit``), counting back,
    died (their observations' ``outcome``). Never raises: what cannot be read ends the
    count (a notification is not a guess)."""
    return _streak(paths, newest, limit, _died)


def _failed_every_call(record: dict[str, Any]) -> bool:
    failure = record.get("provider_failure")
    return failed_every_call(failure if isinstance(failure, dict) else None)


def _died(record: dict[str, Any]) -> bool:
    outcome = record.get("outcome")
    return isinstance(outcome, str) and formats.status_of_outcome(outcome) == "died"


def _streak(paths: LineagePaths, newest: int, limit: int,
            counts: Callable[[dict[str, Any]], bool]) -> int:
    """Generations up to ``newest`` (at most ``limit``), counting back, whose observation
    ``counts``; the first that does not, or cannot be read, ends the count."""
    count = 0
    lineage = Lineage(paths)
    try:
        for number in range(newest, max(0, newest - limit), -1):
            record = lineage.observation(number)
            if record is None or not counts(record):
                break
            count += 1
    except READ_ERRORS as error:
        del error  # what cannot be read ends the count
    return count


def replay_cursor(paths: LineagePaths, newest: int) -> int | None:
    """The replies a replay lineage has used through generation ``newest`` (its
    observation's ``replay_cursor``), or None when unknown. Never raises."""
    try:
        record = Lineage(paths).observation(newest)
    except READ_ERRORS:
        return None
    value = record.get("replay_cursor") if record is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
