#!/usr/bin/env python3
"""How long ouro takes to answer from a cold process: `ouro --version` and
`ouro validate` on one spec, end to end (a fresh interpreter each run).

One command: `python bench/startup.py [--rounds N]`.

Baseline, measured in the same run and interleaved so both see the same machine:
the bare interpreter (`python -c pass`), what any Python command costs before it
does anything. Prints each median, its ratio against the baseline, and whether
the target is met: each command under 0.3 s of wall time. The child's CPU time is
printed too: on a loaded machine wall time waits for a core, CPU time does not.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN = "import sys; from reconciler.cli import main; sys.argv[0] = 'ouro'; main()"
TARGET_S = 0.3
COMMANDS = {
    "python -c pass (baseline)": [sys.executable, "-c", "pass"],
    "ouro --version": [sys.executable, "-c", MAIN, "--version"],
    "ouro validate specs/fleet.yaml": [sys.executable, "-c", MAIN, "validate",
                                       str(ROOT / "specs" / "fleet.yaml")],
}


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[3:]} failed ({done.returncode}): {done.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    rounds = parser.parse_args().rounds
    env = {k: v for k, v in os.environ.items() if k != "OURO_INSTRUMENT_COMMIT"}
    for argv in COMMANDS.values():  # warm the page cache and .pyc files once
        _once(argv, env)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for _ in range(rounds):
        for name, argv in COMMANDS.items():
            times[name].append(_once(argv, env))
    baseline = statistics.median(wall for wall, _ in times["python -c pass (baseline)"])
    missed = False
    for name, samples in times.items():
        median = statistics.median(wall for wall, _ in samples)
        cpu = statistics.median(used for _, used in samples)
        line = (f"{name}: median {median:.3f} s wall, {cpu:.3f} s CPU "
                f"({median / baseline:.1f}x the bare interpreter)")
        if not name.endswith("(baseline)"):
            met = median < TARGET_S
            missed |= not met
            line += f"; target < {TARGET_S} s: {'met' if met else 'MISSED'}"
        print(line)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
