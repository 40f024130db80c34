#!/usr/bin/env python3
"""What back-filling a probe over a lineage's history costs beyond its sandbox runs.

One command: `python bench/probe_backfill.py [--generations N] [--parallel P]`.

A lineage-shaped git dir of N generation commits (organism.el growing by one
definition each; N is 1,000 unless told) and a trivial probe
(``sh -c 'printf {"ok": true}'``). Measured: ``measure_missing`` back-filling all
N generations, P at a time (the tree of each generation archived from the git dir,
the sandbox, the metrics parsed, one record commit each, the coverage read).
Baseline, in the same run and at the same parallelism: N bare runs of the same
command in the same sandbox (``engine.probes.sandbox.measure``, no record, no
coverage). The two alternate in ``--blocks`` blocks (default 10: 100 bare runs, then
the back-fill stopped after 100 records as a cancelled apply stops it, then the
back-fill resumed for the next 100 before 100 bare runs, and so on), so that a load
that changes during the run (the host is shared) weighs on both alike; each resumed
piece reads the coverage again, as the next apply does. Prints both totals, their
ratio (target: at most 1.3, issue 25) and the CPU time this process and its
children spent on each.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.engine.probes import sandbox
from reconciler.engine.probes.measure import measure_missing
from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.probes import ProbeSpec, resolve

TARGET_RATIO = 1.3
SCRIPT = 'printf \'{"ok": true}\''


def lineage(root: Path, generations: int) -> tuple[LineagePaths, list[str]]:
    repo = pygit2.init_repository(str(root / "x.git"), bare=True)
    pygit2.init_repository(str(root / "x.observations"), bare=True)
    signature = pygit2.Signature("ouro", "ouro@invalid", 1_700_000_000, 0)
    body, parents, commits = b"(message \"seed\")\n", [], []
    for number in range(1, generations + 1):
        body += b"(defun g%d () %d)\n" % (number, number)
        builder = repo.TreeBuilder()
        builder.insert("organism.el", repo.create_blob(body), pygit2.enums.FileMode.BLOB)
        oid = repo.create_commit("refs/heads/lineage-x", signature, signature,
                                 f"gen {number}: changed", builder.write(), parents)
        parents, commits = [oid], [*commits, str(oid)]
    paths = LineagePaths(worktree=root / "x", git_dir=root / "x.git",
                         observations=root / "x.observations", branch="lineage-x",
                         observation_branch="observations/lineage-x", name="x")
    return paths, commits


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children (the sandboxes), so far."""
    return sum(usage.ru_utime + usage.ru_stime for usage in (
        resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=10,
                        help="pairs of (bare runs, back-fill piece) alternated")
    args = parser.parse_args()
    probe = resolve(ProbeSpec.model_validate(
        {"name": "ok", "run": ["/bin/sh", "-c", SCRIPT], "ceilings": {"wall": 60, "cpu": 30}}))
    with tempfile.TemporaryDirectory(prefix="ouro-bench-probes-") as temp:
        paths, commits = lineage(Path(temp), args.generations)

        def bare(index: int) -> None:
            run = sandbox.measure(
                git_dir=paths.git_dir, commit=commits[index], command=list(probe.run),
                files=probe.files, ceilings=sandbox.probe_ceilings(60, 30, 512 << 20),
                scope_name=f"ouro-bench-probe-{index}.{os.getpid()}")
            assert run.metrics == {"ok": True}, run

        def bare_runs(indexes: range) -> tuple[float, float]:
            began, cpu = time.monotonic(), cpu_seconds()
            with ThreadPoolExecutor(max_workers=args.parallel) as pool:
                list(pool.map(bare, indexes))
            return time.monotonic() - began, cpu_seconds() - cpu

        def backfill_piece(limit: int) -> tuple[float, float, int]:
            """The back-fill, stopped (as a cancelled apply stops it) after ``limit``
            records; the next piece resumes with what is still missing."""
            cancel, lock, count = threading.Event(), threading.Lock(), [0]

            def written(_record: dict[str, object]) -> None:
                with lock:
                    count[0] += 1
                    if count[0] >= limit:
                        cancel.set()

            began, cpu = time.monotonic(), cpu_seconds()
            done = measure_missing(paths, [probe], parallel=args.parallel, cancel=cancel,
                                   on_record=written)
            assert not done.errors, done
            return time.monotonic() - began, cpu_seconds() - cpu, done.records

        totals = {"bare": [0.0, 0.0, 0], "backfill": [0.0, 0.0, 0]}  # s, CPU s, runs

        def add(step: str, seconds: float, cpu: float, runs: int) -> None:
            totals[step][0] += seconds
            totals[step][1] += cpu
            totals[step][2] += runs

        share = -(-args.generations // args.blocks)
        for block in range(args.blocks):
            for step in (["bare", "backfill"] if block % 2 == 0 else ["backfill", "bare"]):
                if step == "backfill":
                    add(step, *backfill_piece(share))
                else:
                    first = int(totals["bare"][2]) % args.generations
                    runs = min(share, args.generations - int(totals["bare"][2]))
                    add(step, *bare_runs(range(first, first + runs)), runs)
        add("backfill", *backfill_piece(args.generations))  # none left, unless a piece fell short
        extra = int(totals["backfill"][2] - totals["bare"][2])  # a piece may overrun its share
        if extra > 0:
            add("bare", *bare_runs(range(extra)), extra)
        assert totals["backfill"][2] == totals["bare"][2] == args.generations, totals
        assert measure_missing(paths, [probe]).records == 0, "every generation measured"
    backfill, backfill_cpu, _runs = totals["backfill"]
    baseline, baseline_cpu, _runs = totals["bare"]
    ratio = backfill / baseline
    print(f"{args.generations} generations, --parallel {args.parallel}, {args.blocks} blocks: "
          f"back-fill {backfill:.2f} s, bare sandbox runs {baseline:.2f} s, ratio {ratio:.2f} "
          f"(target at most {TARGET_RATIO}); CPU {backfill_cpu:.2f} s vs. {baseline_cpu:.2f} s "
          f"({backfill_cpu / baseline_cpu:.2f}); load average {os.getloadavg()[0]:.1f}")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
