"""The controller's conditions, as `ouro status` and `ouro view` read them. Read-only.

Rule: ``ouro controller`` writes one document, ``<state dir>/.controller/status.json``
(atomically: ``reconciler.ownfiles``), and never a lineage's repositories; this module
reads it. The document is a cache the controller rewrites after every pass: deleting it
loses only the transition times. A missing, unreadable or malformed document reads as
no controller (None), never as an error: status works without a controller.

Shape (``kind`` ``ouro-controller-status``, ``format_version`` 1)::

    {"controller": {"running": bool (read: its lock is held now), "revision": ..,
                    "seen": .., "bad_commit": {..}|null,
                    "last_error": {..}|null, "pid": .., "host": .., "started_at": ..,
                    "updated_at": .., "budget": {..}|null, "repo": .., "branch": .., "path": ..},
     "lineages": {NAME: {"conditions": [{"type", "status", "reason", "message",
                                         "last_transition"}], "action": ..,
                         "generations": .., "desired": .., "orphaned": bool}}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.envelope import envelope
from reconciler.ownfiles import read_regular
from reconciler.state.holders import held_by

__all__ = ["CONDITION_TYPES", "CONTROLLER_DIR", "KIND", "STATUS_FILE", "Condition",
           "ControllerStatus", "LineageConditions", "read_status", "status_path"]

KIND = "ouro-controller-status"
CONTROLLER_DIR = ".controller"
STATUS_FILE = "status.json"
CONDITION_TYPES = ("Ready", "Progressing", "Stalled", "Suspended")
_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Condition:
    type: str  # Ready | Progressing | Stalled | Suspended
    status: str  # "True" | "False" | "Unknown" (as Kubernetes spells them)
    reason: str  # a code: an action, a refusal reason, a stop code
    message: str
    last_transition: str  # ISO 8601, UTC

    def as_json(self) -> dict[str, str]:
        return {"type": self.type, "status": self.status, "reason": self.reason,
                "message": self.message, "last_transition": self.last_transition}


@dataclass(frozen=True)
class LineageConditions:
    name: str
    conditions: tuple[Condition, ...]
    action: str | None = None
    generations: int | None = None
    desired: int | None = None
    orphaned: bool = False

    def get(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    @property
    def stalled(self) -> bool:
        found = self.get("Stalled")
        return found is not None and found.status == "True"

    def as_json(self) -> dict[str, Any]:
        return {"conditions": [c.as_json() for c in self.conditions], "action": self.action,
                "generations": self.generations, "desired": self.desired,
                "orphaned": self.orphaned}


@dataclass(frozen=True)
class ControllerStatus:
    controller: dict[str, Any]
    lineages: dict[str, LineageConditions] = field(default_factory=dict)

    @property
    def revision(self) -> str | None:
        value = self.controller.get("revision")
        return value if isinstance(value, str) else None

    def as_json(self) -> dict[str, Any]:
        return envelope(KIND, controller=self.controller,
                        lineages={name: item.as_json() for name, item in self.lineages.items()})


def status_path(state_dir: Path) -> Path:
    return state_dir / CONTROLLER_DIR / STATUS_FILE


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _lineage(name: str, data: Any) -> LineageConditions | None:
    if not isinstance(data, dict) or not isinstance(data.get("conditions"), list):
        return None
    found = tuple(Condition(_text(c, "type"), _text(c, "status"), _text(c, "reason"),
                            _text(c, "message"), _text(c, "last_transition"))
                  for c in data["conditions"] if isinstance(c, dict))
    action = data.get("action")
    return LineageConditions(name, found, action if isinstance(action, str) else None,
                             _int(data.get("generations")), _int(data.get("desired")),
                             data.get("orphaned") is True)


def read_status(state_dir: Path) -> ControllerStatus | None:
    """The controller's last document in ``state_dir``, or None (none, or unreadable)."""
    try:
        data = json.loads(read_regular(status_path(state_dir), _MAX_BYTES, own_folder=True)
                          or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("kind") != KIND \
            or not isinstance(data.get("controller"), dict):
        return None
    lineages = data.get("lineages") if isinstance(data.get("lineages"), dict) else {}
    assert isinstance(lineages, dict)
    parsed = {name: item for name, raw in lineages.items()
              if isinstance(name, str) and (item := _lineage(name, raw)) is not None}
    # whether a controller holds the state dir now (its lock probed, never taken)
    running = held_by(state_dir / CONTROLLER_DIR / "controller") is not None
    return ControllerStatus(dict(data["controller"], running=running), parsed)
