"""The stop apply made before a lineage's next generation: its record, read (never taken).

Rule: a stop before generation N+1 (the provider still unavailable after a generation whose
every call failed, ``provider-unavailable``; a replay folder with no reply left,
``replay-exhausted``) leaves no generation behind to record it, so apply writes it into
``<git dir>.ouro-stop.json`` beside the lineage's lock (``reconciler.engine.apply``, through
``reconciler.ownfiles``; the record's format is made here, ``stop_record``), and plan and the
viewer read it here. It names the lineage's heads when it was made and holds only while they
are the heads: any generation after it, or a lineage made anew under the name, makes it
stale, and a stale record reads as none. Reading never raises and follows no link; a record
that is too big or malformed reads as none.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.kernel.base.config import LineagePaths
from reconciler.ownfiles import read_regular

__all__ = ["STOP_SUFFIX", "RecordedStop", "read_stop", "stop_path", "stop_record", "stop_stamp"]

STOP_SUFFIX = ".ouro-stop.json"
SCHEMA = "ouro-stop/v1"
_MAX_BYTES = 64 << 10
_MAX_TEXT = 4000  # a message is shown whole; a foreign writer's novel is not


@dataclass(frozen=True)
class RecordedStop:
    """Apply stopped the lineage before generation ``generation + 1`` (``reason``: the
    stop's code, ``message``: why and the remedy)."""

    generation: int
    reason: str
    message: str
    at: str | None


def stop_path(git_dir: Path) -> Path:
    return git_dir.with_name(git_dir.name + STOP_SUFFIX)


def stop_stamp(git_dir: Path) -> tuple[int, int, int] | None:
    """What changes when a stop is recorded or replaced (inode, size, mtime), cheaply:
    a reader that keeps what it read while the heads stay keeps it while this does too."""
    try:
        info = os.lstat(stop_path(git_dir))
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def stop_record(paths: LineagePaths, generation: int, reason: str, message: str) -> bytes:
    """The record of a stop made now, naming the lineage's heads as they are now."""
    from reconciler.state.summaries import heads

    lineage_head, observation_head = heads(paths)
    return (json.dumps({
        "schema": SCHEMA, "generation": generation, "reason": reason, "message": message,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "lineage_head": lineage_head, "observation_head": observation_head,
    }, sort_keys=True) + "\n").encode()


def _text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value[:_MAX_TEXT] if isinstance(value, str) else None


def read_stop(paths: LineagePaths) -> RecordedStop | None:
    """The stop recorded before the lineage's next generation, or None (none recorded, or
    stale: the lineage's heads have moved since)."""
    try:
        data = json.loads(read_regular(stop_path(paths.git_dir), _MAX_BYTES) or b"null")
    except (ValueError, OSError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    generation, reason, message = data.get("generation"), _text(data, "reason"), \
        _text(data, "message")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0 \
            or not reason or message is None:
        return None
    from reconciler.state.summaries import heads  # (only with a stop on record: rare)

    now = heads(paths)
    if now == (None, None) or (data.get("lineage_head"), data.get("observation_head")) != now:
        return None
    return RecordedStop(generation, reason, message, _text(data, "at"))
