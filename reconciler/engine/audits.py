"""Audit the lineages one apply touched, off the generations' path, in batches.

One audit child at a time, each taking every lineage that finished since the last
one started: a child per lineage would cost a Python start-up each, taken from the
generations still running.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from reconciler.engine.verify import AuditHandle, start_background_audit
from reconciler.errors import OuroError
from reconciler.spec.load import LoadedSpec
from reconciler.state.branches import spec_paths

AUDIT_WAIT_S = 120.0  # per batch, once the generations are done


class AuditBatches:
    """Collects finished lineages (``lineage_done``) and audits them; ``finish`` waits."""

    def __init__(self, record_dir: Path | None = None) -> None:
        self._record_dir = record_dir  # the verdict records: each audit reads what is new
        self._mutex = threading.Lock()
        self._waiting: list[LoadedSpec] = []
        self._handles: list[AuditHandle] = []

    def lineage_done(self, spec: LoadedSpec) -> None:
        with self._mutex:
            self._waiting.append(spec)
            if not self._handles or self._handles[-1].done:
                self._launch()

    def _launch(self) -> None:
        if self._waiting:
            items = [(spec.name, spec_paths(spec)) for spec in self._waiting]
            parents = {spec.fork_parent.name: spec_paths(spec.fork_parent)
                       for spec in self._waiting if spec.fork_parent is not None}
            self._handles.append(start_background_audit(items, record_dir=self._record_dir,
                                                        parents=parents))
            self._waiting = []

    def finish(self, *, interrupted: bool) -> dict[str, dict[str, Any]]:
        """Every verdict by lineage name (``status``, ``resumed``, ``findings``); after an
        interrupt, running audits are stopped and lineages not yet audited have none."""
        with self._mutex:
            if not interrupted:
                self._launch()
            handles = list(self._handles)
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
