"""How ``ouro status``, ``ouro plan`` and ``ouro log`` say that a selected set's member was
stopped by a decision (``not-selected``).

Such a member is stopped by the decision's record, not by anything it recorded itself:
``reconciler.engine.epochs`` reads it into the member's place (``Membership.not_selected``).
Kept apart from ``reconciler.report.stops`` (which reads a lineage's history): a plan that
only says it imports nothing of the history (tests/cli/test_startup_imports.py).
"""

from __future__ import annotations

from typing import Any

from reconciler.spec.sets import NOT_SELECTED, NotSelected

__all__ = ["NOT_SELECTED", "not_selected_json", "stopped_text"]


def stopped_text(stop: NotSelected) -> str:
    """One line: a member a selection decision stopped, and why."""
    return f"stopped ({NOT_SELECTED}): {stop.message}"


def not_selected_json(stop: NotSelected | None) -> dict[str, Any] | None:
    """The decision that stopped a member, as JSON (null: none stopped it)."""
    if stop is None:
        return None
    return {"reason": NOT_SELECTED, "epoch": stop.epoch, "generation": stop.generation,
            "by": stop.by, "value": stop.value, "kept": stop.kept, "message": stop.message}
