"""Live progress of remote lineages, read from the event log they append to.

A job runs its lineage with the ordinary engine, which appends one JSON line per thing
it does to ``<state dir>/events.jsonl`` on the shared filesystem, each tagged with the
job's id (``executor_job``). The submitting apply tails that file from where it stood at
submission, and replays the lines of its own jobs into its reporter. A torn last line (a
write in flight) is read again on the next poll.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reconciler.engine.events import EventLog

JOB_FIELD = "executor_job"


class TaggedEventLog(EventLog):
    """The event log of a remote job: every record names the job that wrote it."""

    def __init__(self, path: Path, job: str) -> None:
        super().__init__(path)
        self.job = job

    def emit(self, event: str, **fields: Any) -> None:
        super().emit(event, **{JOB_FIELD: self.job, **fields})


class EventTail:
    """New whole lines of an append-only JSON-lines file, from a starting offset."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.offset = path.stat().st_size
        except OSError:
            self.offset = 0

    def records(self) -> Iterator[dict[str, Any]]:
        try:
            with self.path.open("rb") as stream:
                stream.seek(self.offset)
                data = stream.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def job_id_here() -> str | None:
    """This process's scheduler job id, if it runs inside one."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID")


__all__ = ["JOB_FIELD", "EventTail", "TaggedEventLog", "job_id_here"]
