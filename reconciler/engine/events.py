"""The structured event log: one JSON line per thing apply did, under the state dir.

Append-only (``O_APPEND`` writes of whole lines, so concurrent applies never
interleave within a line). A failure to log never stops a generation: the
lineage and observation repos are the record; this log is the operator's view.
The file is opened without following a link and must be a regular file
(``reconciler.ownfiles``), in a state dir made 0700.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.errors import PathRefused
from reconciler.ownfiles import open_regular, private_folder

EVENT_SCHEMA = "ouro-event/v1"
EVENTS_FILE = "events.jsonl"  # under the state dir


class EventLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self.failed: str | None = None

    def emit(self, event: str, **fields: Any) -> None:
        record = {
            "schema": EVENT_SCHEMA,
            "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "event": event,
            **fields,
        }
        line = (json.dumps(record, default=str, sort_keys=True) + "\n").encode("utf-8")
        with self._mutex:
            try:
                private_folder(self.path.parent, "the state dir")
                descriptor = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                                          0o600, what="the event log")
                try:
                    os.write(descriptor, line)
                finally:
                    os.close(descriptor)
            except OSError as error:
                self.failed = f"{self.path}: {error.strerror}"
            except PathRefused as error:
                self.failed = str(error)
