"""Each lineage's conditions after a pass, and the controller's own, written atomically.

Rule: a condition is derived from what a pass planned and what it ran, never stored in a
lineage's repositories. Its ``last_transition`` changes only when its status changes (as
Kubernetes keeps it), carried over from the previous document, so a restarted controller
keeps the times it wrote. The document (``reconciler.state.conditions``) is a cache:
written whole or not at all in the state dir (``reconciler.ownfiles.write_atomic``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.ownfiles import private_folder, write_atomic
from reconciler.state.conditions import (
    Condition,
    ControllerStatus,
    LineageConditions,
    status_path,
)

__all__ = ["Clock", "LineageView", "derive", "now", "orphaned", "write"]

_FINISHED = ("in-sync", "ahead", "done")
_PENDING = ("create", "extend", "recover")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


Clock = Callable[[], str]  # the time a transition is stamped with (``now``; tests fake it)


@dataclass(frozen=True)
class LineageView:
    """What the controller knows of one lineage after a pass."""

    name: str
    action: str  # the plan's action now (after what ran)
    message: str  # the plan's message
    generations: int
    desired: int
    suspended: bool = False
    stalled_reason: str | None = None  # a refusal reason, a stop code, "error", "daily-budget"
    stalled_message: str = ""
    running: bool = False  # generations ran in this pass


def _conditions(view: LineageView) -> list[tuple[str, str, str, str]]:
    count = f"{view.generations} of {view.desired} generations"
    ready = ("True" if view.action in _FINISHED else "False", view.action,
             f"{count}: {view.message}" if view.action in _FINISHED else count)
    if view.stalled_reason is not None:
        stalled = ("True", view.stalled_reason, view.stalled_message)
    else:
        stalled = ("False", "as-planned", "nothing stops it")
    if view.suspended:
        suspended = ("True", "suspended", "spec.suspend is true: running generations "
                     "finish, none starts")
    else:
        suspended = ("False", "not-suspended", "spec.suspend is false")
    if view.action in _PENDING and view.stalled_reason is None and not view.suspended:
        progressing = ("True", view.action, f"{count}; {view.desired - view.generations} "
                       "to run")
    else:
        why = ("suspended" if view.suspended else view.stalled_reason or view.action)
        progressing = ("False", why, count)
    return [("Ready", *ready), ("Progressing", *progressing), ("Stalled", *stalled),
            ("Suspended", *suspended)]


def _merged(kind: str, status: str, reason: str, message: str,
            before: LineageConditions | None, at: str) -> Condition:
    old = before.get(kind) if before is not None else None
    since = old.last_transition if old is not None and old.status == status else at
    return Condition(kind, status, reason, message, since)


def derive(view: LineageView, before: LineageConditions | None,
           clock: Clock = now) -> LineageConditions:
    """``view``'s conditions, each transition time carried over from ``before``."""
    at = clock()
    found = tuple(_merged(kind, status, reason, message, before, at)
                  for kind, status, reason, message in _conditions(view))
    return LineageConditions(view.name, found, view.action, view.generations, view.desired)


def orphaned(name: str, generations: int | None, before: LineageConditions | None,
             clock: Clock = now) -> LineageConditions:
    """A lineage of the state dir that no spec of the revision names: kept, never touched."""
    at = clock()
    message = "no spec of the applied revision names it; kept (nothing is ever deleted)"
    rows = [("Ready", "Unknown", "orphaned", message),
            ("Progressing", "False", "orphaned", message),
            ("Stalled", "False", "orphaned", message),
            ("Suspended", "False", "orphaned", message)]
    found = tuple(_merged(kind, status, reason, text, before, at)
                  for kind, status, reason, text in rows)
    return LineageConditions(name, found, "orphaned", generations, None, orphaned=True)


def write(state_dir: Path, controller: dict[str, Any],
          lineages: dict[str, LineageConditions]) -> None:
    """The document, whole or not at all (an OSError is the caller's to report)."""
    target = status_path(state_dir)
    private_folder(target.parent, "the controller's cache", replace_link=True)
    document = ControllerStatus(dict(controller, updated_at=now()), lineages).as_json()
    write_atomic(target, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode(),
                 what="the controller's status", mode=0o600, own_folder=True)
