"""What apply and the controller read of a lineage's newest observations before it runs
more. Read-only.

Rule: never raises: an observation that cannot be read counts as no failure (the
provider's probe still guards) and as an unknown replay cursor.
"""

from __future__ import annotations

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import LineagePaths
from reconciler.kernel.base.failures import failed_every_call
from reconciler.state.repos import READ_ERRORS, Lineage

__all__ = ["died_streak", "failed_streak", "replay_cursor"]


def failed_streak(paths: LineagePaths, newest: int, limit: int) -> int:
    """How many of the generations up to ``newest`` (at most ``limit``), counting back,
    had every model call fail (their observations' ``provider_failure``). Never raises."""
    count = 0
    lineage = Lineage(paths)
    try:
        for number in range(newest, max(0, newest - limit), -1):
            record = lineage.observation(number)
            failure = record.get("provider_failure") if record is not None else None
            if not failed_every_call(failure if isinstance(failure, dict) else None):
                break
            count += 1
    except READ_ERRORS as error:
        del error  # unreadable history counts as no failures: the probe still guards
    return count


def died_streak(paths: LineagePaths, newest: int, limit: int) -> int:
    """How many of the generations up to ``newest`` (at most ``limit``), counting back,
    died (their observations' ``outcome``). Never raises: what cannot be read ends the
    count."""
    count = 0
    lineage = Lineage(paths)
    try:
        for number in range(newest, max(0, newest - limit), -1):
            record = lineage.observation(number)
            outcome = record.get("outcome") if record is not None else None
            if not isinstance(outcome, str) or formats.status_of_outcome(outcome) != "died":
                break
            count += 1
    except READ_ERRORS as error:
        del error  # unreadable history ends the streak: a notification is not a guess
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
