"""The audit's child process: ``python -m reconciler.state.audit_child``.

Rule: reads ONE job (JSON) from stdin, audits each lineage with
``reconciler.state.audit`` (pure reading of the repositories), writes ONE JSON
report to stdout, exits 0. With the job's ``record_dir``, each audit resumes
from and updates the lineage's verdict record (``reconciler.state.audit_record``),
the one file it writes.
Nothing else ever reaches stdout: while the audit runs, ``sys.stdout`` points at
stderr, so a stray print cannot corrupt the report. The report carries no paths
and no messages: codes, lineage names, generation numbers, counts, durations,
and at most an exception's class name. The supervisor (``reconciler.engine.verify``)
trusts none of it until it has checked it against the closed schema.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from reconciler.kernel.base.config import LineagePaths
from reconciler.state.audit import IDENTIFIER, LineageAudit, audit_lineage, exception_class_name
from reconciler.state.audit_record import audit_recorded

JOB_SCHEMA = "ouro-verify-job/v2"
REPORT_SCHEMA = "ouro-verify-report/v2"
MAX_JOB_BYTES = 4 << 20
DEFAULT_MAX_FINDINGS = 100  # per lineage; the total count is reported beside them
_PATH_KEYS = ("worktree", "git_dir", "observations")
_BRANCH_KEYS = ("branch", "observation_branch")


class JobInvalid(Exception):
    """The child audits only a well-formed job: anything else is reported as unknown."""


@dataclass(frozen=True)
class Job:
    items: list[tuple[str, LineagePaths]]
    max_findings: int
    record_dir: Path | None = None  # where verdicts are recorded (None: audit in full)
    full: bool = False  # ignore the records (still write the new verdicts)
    # where fork parents live, by name (the job's "parents"; state.forks.check_ancestry)
    parents: dict[str, LineagePaths] = field(default_factory=dict)


def _entry(name: str, paths: LineagePaths) -> dict[str, str]:
    return {"name": name, **{key: str(getattr(paths, key)) for key in _PATH_KEYS},
            **{key: getattr(paths, key) for key in _BRANCH_KEYS}}


def _paths(entry: Any) -> LineagePaths:
    keys = ("name", *_PATH_KEYS, *_BRANCH_KEYS)
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in keys):
        raise JobInvalid("job: lineage entry")
    return LineagePaths(
        worktree=Path(entry["worktree"]),
        git_dir=Path(entry["git_dir"]),
        observations=Path(entry["observations"]),
        branch=entry["branch"],
        observation_branch=entry["observation_branch"],
        name=entry["name"],
    )


def encode_job(items: list[tuple[str, LineagePaths]], *, max_findings: int,
               record_dir: Path | None = None, full: bool = False,
               parents: Mapping[str, LineagePaths] | None = None) -> bytes:
    """The job the supervisor writes to the child's stdin (``parents``: where the forks'
    parents live, by name; optional, so an older job still reads)."""
    job = {"schema": JOB_SCHEMA, "max_findings": max_findings,
           "lineages": [_entry(name, paths) for name, paths in items],
           "record_dir": None if record_dir is None else str(record_dir), "full": full,
           "parents": [_entry(name, paths) for name, paths in (parents or {}).items()]}
    return json.dumps(job, ensure_ascii=False).encode("utf-8")


def decode_job(data: bytes) -> Job:
    try:
        job = json.loads(data.decode("utf-8"))
    except ValueError as error:
        raise JobInvalid("job: not JSON") from error
    if not isinstance(job, dict) or job.get("schema") != JOB_SCHEMA:
        raise JobInvalid("job: wrong schema")
    max_findings = job.get("max_findings")
    lineages = job.get("lineages")
    if not isinstance(max_findings, int) or isinstance(max_findings, bool) or max_findings < 0:
        raise JobInvalid("job: max_findings")
    if not isinstance(lineages, list):
        raise JobInvalid("job: lineages")
    record_dir, full = job.get("record_dir"), job.get("full")
    if not (record_dir is None or (isinstance(record_dir, str) and record_dir)):
        raise JobInvalid("job: record_dir")
    if not isinstance(full, bool):
        raise JobInvalid("job: full")
    items = [(paths.name, paths) for paths in map(_paths, lineages)]
    parents = job.get("parents", [])
    if not isinstance(parents, list):
        raise JobInvalid("job: parents")
    return Job(items, max_findings, None if record_dir is None else Path(record_dir), full,
               {paths.name: paths for paths in map(_paths, parents)})


def audit_one(job: Job, name: str, paths: LineagePaths) -> LineageAudit:
    """One lineage's audit (a fork's link to its parent included: the job's lineages and
    ``parents`` are where a parent is looked for, by name)."""
    known = {**dict(job.items), **job.parents}
    if job.record_dir is None:
        return audit_lineage(paths, name, parents=known.get)
    return audit_recorded(paths, name, job.record_dir, full=job.full, parents=known.get)


def lineage_record(audit: LineageAudit, max_findings: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "lineage": audit.lineage,
        "status": audit.status,
        "generations": audit.generations,
        "observations": audit.observations,
        "commits": audit.commits,
        "findings_total": len(audit.findings),
        "duration_ms": audit.duration_ms,
        "resumed": audit.resumed,
        "findings": [
            {"code": f.code, "lineage": f.lineage, "generation": f.generation}
            for f in audit.findings[:max_findings]
        ],
        "ancestry": audit.ancestry,
    }
    if audit.exception_class is not None and IDENTIFIER.match(audit.exception_class):
        record["exception_class"] = audit.exception_class
    return record


def overall_status(statuses: list[str]) -> str:
    if not statuses or "unknown" in statuses:
        return "unknown"
    return "findings" if "findings" in statuses else "consistent"


def run(stdin: BinaryIO) -> dict[str, Any]:
    """Read the job, audit, return the report (never raises)."""
    wall = time.monotonic()
    cpu = time.process_time()
    report: dict[str, Any] = {"schema": REPORT_SCHEMA}
    try:
        data = stdin.read(MAX_JOB_BYTES + 1)
        if len(data) > MAX_JOB_BYTES:
            raise JobInvalid("job: too large")
        job = decode_job(data)
        lineages = [lineage_record(audit_one(job, n, p), job.max_findings)
                    for n, p in job.items]
        report["status"] = overall_status([record["status"] for record in lineages])
        report["lineages"] = lineages
    except Exception as error:  # the report is the only output: never a traceback
        report["status"] = "unknown"
        report["lineages"] = []
        name = exception_class_name(error)
        if name is not None:
            report["exception_class"] = name
    report["duration_ms"] = max(0, int((time.monotonic() - wall) * 1000))
    report["cpu_ms"] = max(0, int((time.process_time() - cpu) * 1000))
    return report


def main() -> int:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing but the report reaches the real stdout, not even from C
    sys.stdout = sys.stderr
    report = run(sys.stdin.buffer)
    out.write(json.dumps(report, separators=(",", ":"), allow_nan=False).encode("utf-8"))
    out.flush()
    out.close()
    return 0


if __name__ == "__main__":
    status = main()
    sys.stderr.flush()
    # The report is written and closed, the verdict records synced: the supervisor waits
    # for this exit, and an interpreter's tear-down of what the audit imported (pygit2
    # and the rest: ~30 ms) is of no use to anyone.
    os._exit(status)
