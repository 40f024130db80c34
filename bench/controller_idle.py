#!/usr/bin/env python3
"""Benchmark an idle `ouro controller` over 100 lineages that are all in sync.

One command: `python bench/controller_idle.py [--lineages L] [--generations G]
[--interval D] [--seconds S]`.

The lineages are written once with plan_bench.py's builder (docs/lineage-contract.md's formats,
pygit2, a fixed instrument) at their default places in a state dir of their own, cached
under the temp folder's ouro-bench/ (ouro refuses lineages on the host Python's path); a
spec repository beside them holds one spec per lineage, each asking for the G
generations it has. The controller runs as a user runs it (a process of its own, polling
every D, default 10s: six times the default's rate); once its first pass has written
every lineage Ready, its CPU time (user + system, /proc/PID/stat) and its resident memory
(peak, VmHWM) are read over S seconds (default 120) of idling.

Prints both; exits 1 if the controller uses 2 % of one core or more, 150 MB or more, or
a lineage is not Ready.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import plan_bench  # noqa: E402  (sets OURO_INSTRUMENT_COMMIT: the fleet's fixed instrument)

FORMAT = 1  # bump when the layout changes
TARGET_CPU = 0.02  # of one core
TARGET_MB = 150.0


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@invalid", *args],
                   cwd=cwd, check=True, capture_output=True)


def build(lineages: int, generations: int) -> Path:
    root = (Path(tempfile.gettempdir()) / "ouro-bench"
            / f"controller-v{FORMAT}-L{lineages}-G{generations}")
    if (root / ".complete").exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    state, specs = root / "lineages", root / "specs-repo" / "specs"
    state.mkdir(parents=True, mode=0o700)
    specs.mkdir(parents=True)
    names = [f"idle{index:03d}" for index in range(lineages)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(plan_bench.build_lineage,
                      [(state, name, generations, i, "loose") for i, name in enumerate(names)]))
    for name in names:
        (specs / f"{name}.yaml").write_text(
            f"apiVersion: ouro/v1\nkind: Lineage\nmetadata:\n  name: {name}\nspec:\n"
            f"  generations: {generations}\n  model:\n    provider: echo\n    name: echo\n",
            encoding="utf-8")
    _git("init", "-q", "-b", "main", cwd=specs.parent)
    _git("add", "-A", cwd=specs.parent)
    _git("commit", "-q", "-m", "specs", cwd=specs.parent)
    (root / ".complete").write_text("built\n")
    return root


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _ready(state: Path, count: int) -> int:
    try:
        document = json.loads((state / ".controller" / "status.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(1 for item in document.get("lineages", {}).values()
               if any(c["type"] == "Ready" and c["status"] == "True"
                      for c in item.get("conditions", [])))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lineages", type=int, default=100)
    parser.add_argument("--generations", type=int, default=5)
    parser.add_argument("--interval", default="10s")
    parser.add_argument("--seconds", type=float, default=120.0)
    options = parser.parse_args()
    root = build(options.lineages, options.generations)
    state = root / "lineages"
    shutil.rmtree(state / ".controller", ignore_errors=True)
    log = (root / "controller.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-c", plan_bench.PIN, "controller", "--repo",
         str(root / "specs-repo"), "--interval", options.interval, "--state-dir", str(state)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()
        while _ready(state, options.lineages) < options.lineages:
            if process.poll() is not None or time.monotonic() - started > 600:
                print(f"the controller did not make every lineage Ready: "
                      f"{(root / 'controller.log').read_text()[-2000:]}")
                return 1
            time.sleep(0.5)
        first = time.monotonic() - started
        time.sleep(2.0)  # the pass that wrote Ready is over
        cpu0, wall0 = _cpu_seconds(process.pid), time.monotonic()
        time.sleep(options.seconds)
        cpu = (_cpu_seconds(process.pid) - cpu0) / (time.monotonic() - wall0)
        peak = _peak_mb(process.pid)
        ready = _ready(state, options.lineages)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        log.close()
    print(f"controller over {options.lineages} in-sync lineages x {options.generations} "
          f"generations, polling every {options.interval}: first pass (all Ready) {first:.1f} s")
    print(f"idle for {options.seconds:.0f} s: CPU {cpu * 100:.2f} % of one core; "
          f"peak resident memory {peak:.1f} MB; {ready} of {options.lineages} Ready")
    met = cpu < TARGET_CPU and peak < TARGET_MB and ready == options.lineages
    print(f"target: < {TARGET_CPU * 100:.0f} % of one core and < {TARGET_MB:.0f} MB "
          f"({'met' if met else 'MISSED'})")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
