"""Audit the lineages one apply touched, off the generations' path, in batches.

One audit child at a time, each taking every lineage that finished since the last
one started: a child per lineage would cost a Python start-up each, taken from the
generations still running. The child is started ahead of its job (``WarmChild``): its
Python start-up and imports (about 0.4 s of CPU, seconds on a loaded host) happen while
the generations run, and it waits on its stdin for the lineages to audit; the apply's
end waits only for the audit's own work.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reconciler.engine.fleet import Fleet
from reconciler.engine.verify import (
    AuditHandle,
    Child,
    SpawnFn,
    child_argv,
    child_env,
    spawn_child,
    start_background_audit,
)
from reconciler.errors import OuroError
from reconciler.spec.load import LoadedSpec

AUDIT_WAIT_S = 120.0  # per batch, once the generations are done
# While a fleet's generations run, a batch waits for this share of its lineages: each
# batch is a child's start (~0.08 s of CPU), and lineages that end close together made
# one batch each (32 lineages: 12 batches, 11 ms of CPU a generation).
BATCH_SHARE = 4


def batch_ready(waiting: int, unaudited: int, expected: int) -> bool:
    """Is a batch of ``waiting`` finished lineages to be audited now, ``unaudited`` of the
    ``expected`` not handed to an audit yet (those waiting included)? When a quarter of
    the fleet waits, or every lineage left does (the last batch never waits)."""
    return waiting >= max(1, min(unaudited, -(-expected // BATCH_SHARE)))


class WarmChild:
    """At most one audit child started before its job. ``handout`` gives it to the next
    audit as its spawn step (used when that audit asks for the same command and
    environment, else that audit spawns its own, as before); the child reads its one job
    from stdin only once it is given one. ``close`` ends every child never used."""

    def __init__(self, spawn: SpawnFn = spawn_child) -> None:
        self._spawn = spawn
        self._mutex = threading.Lock()
        self._spare: tuple[list[str], dict[str, str], Child] | None = None
        self._unused: list[Child] = []  # handed out, not (yet) taken by their audit

    def warm(self) -> None:
        """Start the spare now (nothing if there is one; a failure leaves none)."""
        with self._mutex:
            if self._spare is not None:
                return
            argv, env = child_argv(), child_env()
            try:
                self._spare = (argv, env, self._spawn(argv, env))
            except (OSError, subprocess.SubprocessError):
                self._spare = None

    def handout(self) -> SpawnFn:
        """The spawn step of the audit launched now: the spare, taken at this moment."""
        with self._mutex:
            spare, self._spare = self._spare, None
            if spare is not None:
                self._unused.append(spare[2])

        def spawn(argv: list[str], env: Mapping[str, str]) -> Child:
            child = self._take(spare[2]) if spare is not None else None
            if child is None or spare is None:
                return self._spawn(argv, env)
            if (spare[0], spare[1]) == (argv, dict(env)):
                return child
            _end(child)  # started for another command or environment
            return self._spawn(argv, env)

        return spawn

    def _take(self, child: Child) -> Child | None:
        """``child`` for its audit, unless ``close`` ended it first."""
        with self._mutex:
            if child not in self._unused:
                return None
            self._unused.remove(child)
            return child

    def close(self) -> None:
        """End the spare and every handed-out child its audit never took (call it once
        the audits are over)."""
        with self._mutex:
            ends = [*self._unused, *([self._spare[2]] if self._spare else [])]
            self._spare, self._unused = None, []
        for child in ends:
            _end(child)


def _end(child: Child) -> None:
    """End an unused spare: its stdin closes (it reads an empty job), then it is killed."""
    if child.stdin is not None:
        with contextlib.suppress(OSError):
            child.stdin.close()
    child.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(5.0)


class AuditBatches:
    """Collects finished lineages (``lineage_done``) and audits them; ``finish`` waits.
    ``expected``: how many lineages will run generations; while some of them are still to
    be audited, a spare child waits for their batch (``WarmChild``)."""

    def __init__(self, record_dir: Path | None = None, *, expected: int = 0,
                 children: WarmChild | None = None) -> None:
        self._record_dir = record_dir  # the verdict records: each audit reads what is new
        self._mutex = threading.Lock()
        self._waiting: list[LoadedSpec] = []
        self._handles: list[AuditHandle] = []
        self._expected = expected
        self._launched = 0  # lineages handed to an audit
        self._children = children or WarmChild()
        if expected:
            self._children.warm()

    def lineage_done(self, spec: LoadedSpec) -> None:
        with self._mutex:
            self._waiting.append(spec)
            idle = not self._handles or self._handles[-1].done
            if idle and batch_ready(len(self._waiting), self._expected - self._launched,
                                    self._expected):
                self._launch()

    def _launch(self) -> None:
        if self._waiting:
            where = Fleet().where  # (the places and branches alone: no state dir is read)
            items = [(spec.name, where(spec)) for spec in self._waiting]
            parents = {spec.fork_parent.name: where(spec.fork_parent)
                       for spec in self._waiting if spec.fork_parent is not None}
            self._handles.append(start_background_audit(
                items, record_dir=self._record_dir, parents=parents,
                spawn=self._children.handout()))
            self._launched += len(self._waiting)
            self._waiting = []
            if self._launched < self._expected:  # more lineages will finish: the next batch
                self._children.warm()

    def finish(self, *, interrupted: bool) -> dict[str, dict[str, Any]]:
        """Every verdict by lineage name (``status``, ``resumed``, ``findings``); after an
        interrupt, running audits are stopped and lineages not yet audited have none."""
        with self._mutex:
            self._expected = 0  # no batch after this one
            if not interrupted:
                self._launch()
            handles = list(self._handles)
        try:
            return _verdicts(handles, interrupted=interrupted)
        finally:
            self._children.close()


def _verdicts(handles: list[AuditHandle], *, interrupted: bool) -> dict[str, dict[str, Any]]:
    """The audits' verdicts by lineage (each waited for, or stopped after an interrupt)."""
    verdicts: dict[str, dict[str, Any]] = {}
    for handle in handles:
        if interrupted:
            handle.stop()
        try:
            report = handle.result(AUDIT_WAIT_S)
        except (TimeoutError, OuroError):
            handle.stop()
            continue
        for lineage in report.lineages:
            verdicts[lineage.lineage] = {
                "status": lineage.status,
                "resumed": lineage.resumed,  # generations its last clean verdict covered
                "findings": [
                    f"{f.code} (gen {f.generation})" if f.generation else f.code
                    for f in lineage.findings
                ],
            }
            if lineage.status == "unknown":  # why: the audit's outcome, for the summary
                verdicts[lineage.lineage]["why"] = ("interrupted" if interrupted
                                                    else report.outcome)
    return verdicts
