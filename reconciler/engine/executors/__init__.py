"""Executors: where apply runs the lineages it planned.

An executor takes the (spec, plan) pairs of one apply and returns one
``LineageResult`` per lineage; the engine's rules (a lineage runs under its lock,
re-planned there; a generation is never run twice; only a ``TransientError`` is
retried) hold whatever the executor, because every executor ends in
``Engine.run_lineage``, here or on another machine:

- ``local``: the engine's thread pool, ``--parallel`` lineages at once on this host;
- ``slurm``: one Slurm job per lineage (``slurm``), each running ``request.run_request``
  on a node against the shared state dir, followed from here.

The remote contract is ``request.LineageRequest`` (JSON) in and a result document
(JSON) out, so an executor that runs a command instead of a pickled function (a
Kubernetes Indexed Job, docs/kubernetes.md) runs
``python -m reconciler.engine.executors.request`` with the request on stdin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from reconciler.engine.apply import Engine, LineageResult
from reconciler.errors import ApplyError
from reconciler.plan import LineagePlan
from reconciler.spec.load import LoadedSpec

EXECUTORS = ("local", "slurm")


class Executor(Protocol):
    """Runs the lineages of one apply; one result per (spec, plan) pair."""

    name: str

    def run(
        self, jobs: Sequence[tuple[LoadedSpec, LineagePlan]], parallel: int
    ) -> list[LineageResult]: ...


@dataclass
class LocalExecutor:
    """The engine's own thread pool on this host."""

    engine: Engine
    name = "local"

    def run(
        self, jobs: Sequence[tuple[LoadedSpec, LineagePlan]], parallel: int
    ) -> list[LineageResult]:
        return self.engine.run(jobs, parallel)


def check_options(name: str, *, deadline: float | None, max_generations: int | None) -> None:
    """Refuse apply's options that an executor cannot honour, before anything runs."""
    if name not in EXECUTORS:
        raise ApplyError(
            f"ouro apply: --executor {name!r}: no such executor (known: {', '.join(EXECUTORS)})"
        )
    if name != "local" and (deadline is not None or max_generations is not None):
        raise ApplyError(
            f"ouro apply: --deadline and --max-generations count this host's generations; "
            f"with --executor {name} each job stops at its own time limit instead "
            "(spec.executor.slurm.time): leave them out"
        )


def make_executor(name: str, engine: Engine, state_dir: Path) -> Executor:
    """The executor called ``name`` (``--executor``), around this apply's engine."""
    if name == "local":
        return LocalExecutor(engine)
    if name == "slurm":
        from reconciler.engine.executors.slurm import SlurmExecutor

        return SlurmExecutor(engine, state_dir)
    raise ApplyError(
        f"ouro apply: --executor {name!r}: no such executor (known: {', '.join(EXECUTORS)})"
    )


__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "check_options", "make_executor"]
