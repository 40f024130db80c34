"""Measure what is missing: every generation by every probe at its current digest.

Rule: the work is what the records lack -- (digest, generation) pairs with no
record, the seed (generation 0) included -- read afresh when measuring starts, so a
measuring killed midway resumes with exactly what is still missing, and no pair is
measured twice (each pair is taken by one worker; records are written one commit
each). A probe's own failure is a record; a sandbox that cannot start (no ceilings
backend, bwrap missing) is an error of the apply, recorded nowhere, and stops the
measuring. The caller holds the lineage's apply lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pygit2

from reconciler.kernel.base.config import LineagePaths
from reconciler.kernel.base.errors import KernelError
from reconciler.spec.probes import ResolvedProbe
from reconciler.state import probe_rules
from reconciler.state import probes as stored

from . import records, sandbox

__all__ = ["Measured", "NotWritten", "Work", "measure_missing", "missing_work"]


@dataclass(frozen=True)
class Work:
    probe: ResolvedProbe
    generation: int
    commit: str


@dataclass
class Measured:
    records: int = 0
    failures: int = 0  # records of a probe failure
    # the sandbox could not run, or a record could not be written
    errors: list[str] = field(default_factory=list)


def missing_work(paths: LineagePaths, probes: Sequence[ResolvedProbe],
                 only: int | None = None) -> list[Work]:
    """The missing (probe, generation) pairs, newest generation first, the seed
    (generation 0) last (``only``: that generation alone, and the seed while it has no
    record: a lineage's first measured generation measures its seed too)."""
    if not probes:
        return []
    commits = stored.generation_commits(paths)
    seed = stored.seed_commit(paths)
    covered = stored.coverage(paths)
    numbers = [only] if only is not None and 0 < only <= len(commits) else (
        [] if only is not None else list(range(len(commits), 0, -1)))
    work = [Work(probe, number, commits[number - 1]) for number in numbers
            for probe in probes if number not in covered.get(probe.digest, frozenset())]
    if seed is not None:
        work += [Work(probe, 0, seed) for probe in probes
                 if 0 not in covered.get(probe.digest, frozenset())]
    return work


class NotWritten(Exception):
    """A generation was measured but its record could not be written (the message says
    where and why): not the sandbox's failure."""


def _record(work: Work, run: sandbox.Run) -> dict[str, Any]:
    return {
        "probe": work.probe.name, "digest": work.probe.digest, "generation": work.generation,
        "commit": work.commit, "outcome": "failed" if run.failure is not None else "measured",
        "metrics": run.metrics, "failure": run.failure,
        "exit": run.exit_status, "wall_ms": run.wall_ms, "cpu_ms": run.cpu_ms,
        "peak_memory_bytes": run.peak_memory_bytes, "stderr_tail": run.stderr_tail,
    }


def _one(paths: LineagePaths, work: Work) -> dict[str, Any]:
    ceilings = work.probe.ceilings
    run = sandbox.measure(
        git_dir=paths.git_dir, commit=work.commit, command=list(work.probe.run),
        files=work.probe.files,
        ceilings=sandbox.probe_ceilings(ceilings.wall, ceilings.cpu, ceilings.memory),
        # ``.<pid>`` last: a sweep of dead kernels' scopes keeps a live process's
        # (``kernel.ceilings.reap_stale_scopes``), which may not have filled it yet
        scope_name=f"ouro-probe-{work.probe.digest[:12]}-{work.generation}-"
                   f"{threading.get_ident() % 100000}.{os.getpid()}")
    record = _record(work, run)
    broken = probe_rules.record_problem(record)
    if broken is not None:  # the readers would not believe it: never written
        raise NotWritten(f"its record breaks a rule of probe records ({broken[1]})")
    try:
        records.write_record(paths, work.probe.describe(), work.probe.files, work.generation,
                             record)
    except (OSError, ValueError, pygit2.GitError) as error:
        raise NotWritten(f"its record could not be written to {paths.observations}: "
                         f"{error}") from error
    return record


def measure_missing(paths: LineagePaths, probes: Sequence[ResolvedProbe], *, parallel: int = 1,
                    cancel: threading.Event | None = None, only: int | None = None,
                    on_record: Callable[[dict[str, Any]], None] | None = None) -> Measured:
    """Measure what is missing (``only``: of that generation), ``parallel`` at a time."""
    done = Measured()
    work = missing_work(paths, probes, only)
    if not work:
        return done
    stop = threading.Event()
    lock = threading.Lock()

    def task(item: Work) -> None:
        if stop.is_set() or (cancel is not None and cancel.is_set()):
            return
        try:
            record = _one(paths, item)
        except (NotWritten, KernelError, OSError, RuntimeError, ValueError,
                pygit2.GitError) as error:
            why = error if isinstance(error, NotWritten) else f"the sandbox could not run: {error}"
            stop.set()
            with lock:
                done.errors.append(f"probe {item.probe.name} on gen {item.generation}: {why}")
            return
        with lock:
            done.records += 1
            done.failures += record["failure"] is not None
        if on_record is not None:
            on_record(record)

    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="probe") as pool:
        for future in [pool.submit(task, item) for item in work]:
            future.result()
    return done
