#!/usr/bin/env python3
"""How long ouro takes to answer from a cold process: `ouro --version`, `ouro validate`
on one spec, and `ouro plan` and `ouro apply` of one lineage that is in sync, end to end
(a fresh interpreter each run).

One command: `python bench/startup.py [--rounds N]`. The in-sync lineage (one generation
of the offline `echo` provider) is grown once, by a real `ouro apply`, in a temporary
state dir (`--no-lineage` skips those two commands).

Baseline, measured in the same run and interleaved so both see the same machine:
the bare interpreter (`python -c pass`), what any Python command costs before it
does anything. Prints each median, its ratio against the baseline, and whether
the target is met: `--version` and `validate` under 0.3 s of wall time, an in-sync
`plan` under 0.25 s and an in-sync `apply` under 0.3 s (issue 21). The child's CPU
time is printed too: on a loaded machine wall time waits for a core, CPU time does not;
so is the load average before and after.

Byte code: every command runs from compiled ``.pyc`` files, as an installed ouro does (pip
compiles them at install). They are written once, by the warm-up run, under the run's
scratch folder (``PYTHONPYCACHEPREFIX``), never into the checkout; an inherited
``PYTHONDONTWRITEBYTECODE`` is dropped, for with it every run compiled ouro's sources
again (~45% more instructions for an in-sync plan): that measured the compiler.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN = "import sys; from reconciler.cli import console_main; sys.argv[0] = 'ouro'; console_main()"
TARGET_S = 0.3
TARGETS = {"ouro plan (in sync)": 0.25, "ouro apply (in sync)": 0.3}  # else TARGET_S
SPEC = """apiVersion: ouro/v1
kind: Lineage
metadata:
  name: steady
spec:
  generations: 1
  model:
    provider: echo
  ceilings:
    wall: 60s
    cpu: 30s
    memory: 512MiB
"""
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


def _in_sync(folder: Path, env: dict[str, str]) -> dict[str, list[str]]:
    """Grow one lineage to its spec under ``folder``; the plan and apply that find it in
    sync."""
    spec = folder / "steady.yaml"
    spec.write_text(SPEC)
    env["OURO_STATE_DIR"] = str(folder / "state")
    grow = [sys.executable, "-c", MAIN, "apply", "--yes", str(spec)]
    done = subprocess.run(grow, cwd=ROOT, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"growing the lineage failed ({done.returncode}): "
                         f"{done.stderr.decode()}")
    return {"ouro plan (in sync)": [sys.executable, "-c", MAIN, "plan", str(spec)],
            "ouro apply (in sync)": [sys.executable, "-c", MAIN, "apply", "--yes",
                                     str(spec)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-lineage", action="store_true",
                        help="only --version and validate (no sandbox needed)")
    options = parser.parse_args()
    rounds = options.rounds
    dropped = ("OURO_INSTRUMENT_COMMIT", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    with tempfile.TemporaryDirectory(prefix="ouro-startup-") as scratch:
        env["PYTHONPYCACHEPREFIX"] = str(Path(scratch) / "pycache")
        commands = dict(COMMANDS)
        if not options.no_lineage:
            commands.update(_in_sync(Path(scratch), env))
        return _measure(commands, env, rounds)


def _load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def _measure(commands: dict[str, list[str]], env: dict[str, str], rounds: int) -> int:
    for argv in commands.values():  # warm the page cache and .pyc files once
        _once(argv, env)
    print(f"load average (1/5/15 min) before: {_load()}")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            times[name].append(_once(argv, env))
    baseline = statistics.median(wall for wall, _ in times["python -c pass (baseline)"])
    missed = False
    for name, samples in times.items():
        median = statistics.median(wall for wall, _ in samples)
        cpu = statistics.median(used for _, used in samples)
        line = (f"{name}: median {median:.3f} s wall, {cpu:.3f} s CPU "
                f"({median / baseline:.1f}x the bare interpreter)")
        if not name.endswith("(baseline)"):
            target = TARGETS.get(name, TARGET_S)
            met = median < target
            missed |= not met
            line += f"; target < {target} s: {'met' if met else 'MISSED'}"
        print(line)
    print(f"load average (1/5/15 min) after: {_load()}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
