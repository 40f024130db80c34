#!/usr/bin/env python3
"""Benchmark `ouro plan` of a LineageSet of 1,000 members (10 cells x 100 replicas), all in sync.

One command: `python bench/set_bench.py [--cells C] [--replicas R] [--generations G]
[--rounds N]`.

The members' lineages are written once with plan_bench.py's builder (docs/lineage-contract.md's
formats, pygit2, a fixed instrument) at the set's default places in a state dir of their
own, cached under the temp folder's ouro-bench/ (not bench/out/: ouro refuses lineages
on the host Python's path). Measured in the same run, as fresh processes (imports
included: what a user waits for):
- the set: `ouro plan SET.yaml --json` and `ouro plan SET.yaml` (text, grouped);
- the baseline: `ouro plan SPECS/ --json` of the same lineages written as C x R plain
  Lineage spec files.

Prints each figure (wall time and the command's CPU time, user + system: on a loaded
host the CPU time is the steadier one) and the ratio of the set against the baseline, then
the set's own part, in this process (CPU): `load_specs` of the set against the same
lineages as plain files (the expansion is inside the first), and finding the set's orphans
(`engine.sets.set_orphans`). Exits 1 if the plan is wrong (every member must be in sync at
G generations, no orphan) or the set's plan takes 1 s or more.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import plan_bench  # noqa: E402  (sets OURO_INSTRUMENT_COMMIT: the fleet's fixed instrument)

from reconciler.spec.load import load_specs  # noqa: E402

FORMAT = 1  # bump when the layout changes
TARGET_SECONDS = 1.0


def _set_text(cells: int, replicas: int, generations: int) -> str:
    values = ", ".join(str(cpus) for cpus in range(1, cells + 1))
    return ("apiVersion: ouro/v1\nkind: LineageSet\nmetadata: {name: bench}\nspec:\n"
            f"  replicas: {replicas}\n  matrix:\n    executor.slurm.cpus: [{values}]\n"
            f"  template:\n    generations: {generations}\n"
            "    model: {provider: echo, name: echo}\n")


def build(cells: int, replicas: int, generations: int) -> Path:
    # Outside the checkout: ouro refuses lineages on the host Python's path (bench/ is).
    root = (Path(tempfile.gettempdir()) / "ouro-bench"
            / f"set-v{FORMAT}-C{cells}-R{replicas}-G{generations}")
    if (root / ".complete").exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    state, specs = root / "lineages", root / "specs"
    state.mkdir(parents=True)
    specs.mkdir()
    (root / "set.yaml").write_text(_set_text(cells, replicas, generations), encoding="utf-8")
    members = load_specs([root / "set.yaml"], state_dir=state)
    started = time.perf_counter()
    jobs = [(state, spec.name, generations, 0, "loose") for spec in members]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(plan_bench.build_lineage, jobs))
    for spec in members:  # the baseline: the same lineages, one plain spec file each
        cpus = spec.spec.spec.executor.slurm.cpus
        (specs / f"{spec.name}.yaml").write_text(
            f"apiVersion: ouro/v1\nkind: Lineage\nmetadata:\n  name: {spec.name}\nspec:\n"
            f"  generations: {generations}\n  model: {{provider: echo, name: echo}}\n"
            f"  executor: {{slurm: {{cpus: {cpus}}}}}\n", encoding="utf-8")
    (root / ".complete").write_text(f"{time.perf_counter() - started:.1f}s\n")
    return root


def run(root: Path, target: Path, *extra: str) -> tuple[float, int, str, float]:
    """Wall seconds, exit code, stdout and CPU seconds of one `ouro plan`."""
    cpu = plan_bench.children_cpu()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", plan_bench.PIN, "plan", str(target),
                           "--state-dir", str(root / "lineages"), *extra],
                          cwd=ROOT, capture_output=True, text=True, check=False,
                          env=plan_bench.cli_env())
    return (time.perf_counter() - started, done.returncode, done.stdout,
            plan_bench.children_cpu() - cpu)


def set_part(root: Path, rounds: int) -> dict[str, float]:
    """The set's own CPU seconds, in this process (best of ``rounds``): loading the set
    (expansion included) against loading the same lineages as plain files, and finding
    its orphans."""
    from reconciler.engine.sets import set_orphans

    state = root / "lineages"
    found: dict[str, list[float]] = {"load set.yaml": [], "load SPECS/": [], "orphans": []}
    for _ in range(rounds):
        started = time.process_time()
        load_specs([root / "specs"], state_dir=state)
        found["load SPECS/"].append(time.process_time() - started)
        started = time.process_time()
        members = load_specs([root / "set.yaml"], state_dir=state)
        found["load set.yaml"].append(time.process_time() - started)
        started = time.process_time()
        set_orphans(members, members, state)
        found["orphans"].append(time.process_time() - started)
    return {name: min(values) for name, values in found.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=10)
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--generations", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    root = build(options.cells, options.replicas, options.generations)
    count = options.cells * options.replicas
    print(f"set: {options.cells} cells x {options.replicas} replicas = {count} members x "
          f"{options.generations} generations, at {root} "
          f"(built in {(root / '.complete').read_text().strip()})")
    run(root, root / "set.yaml", "--json")  # warm-up: byte code written (plan_bench.cli_env)
    before = plan_bench.load_average()
    base = [run(root, root / "specs", "--json") for _ in range(options.rounds)]
    sets = [run(root, root / "set.yaml", "--json") for _ in range(options.rounds)]
    text = [run(root, root / "set.yaml") for _ in range(options.rounds)]

    problems = [f"ouro plan exited {code}, expected 0 (in sync)"
                for _, code, _, _ in (*base, *sets, *text) if code != 0][:3]
    document = json.loads(sets[-1][2] or "{}")
    lineages = document.get("lineages", [])
    if len(lineages) != count or document.get("orphaned"):
        problems.append(f"{len(lineages)} members and orphans {document.get('orphaned')}")
    problems += [f"{item['name']}: {item['action']}" for item in lineages
                 if (item["action"], item["set"]) != ("in-sync", "bench")][:5]
    if f"set bench: {count} members" not in text[-1][2]:
        problems.append("the text plan has no heading for the set")

    # Best of the rounds alike: the machine is shared; the minimum is least disturbed.
    b, s, t = (min(t for t, _, _, _ in runs) for runs in (base, sets, text))
    bc, sc, tc = (min(c for _, _, _, c in runs) for runs in (base, sets, text))
    print(f"baseline: `ouro plan SPECS/ --json`, {count} plain spec files: {b:.3f} s "
          f"(CPU {bc:.3f} s)")
    print(f"set: `ouro plan set.yaml --json`: {s:.3f} s (CPU {sc:.3f} s)  "
          f"ratio {s / b:.2f}x the baseline")
    print(f"set: `ouro plan set.yaml` (text, grouped): {t:.3f} s (CPU {tc:.3f} s)  "
          f"ratio {t / b:.2f}x")
    print(f"load average before/after: {before} / {plan_bench.load_average()}")
    part = set_part(root, options.rounds)
    print("the set's own part, in process (CPU): "
          + ", ".join(f"{name} {value:.3f} s" for name, value in part.items()))
    met = max(s, t) < TARGET_SECONDS
    print(f"target: the set's plan < {TARGET_SECONDS:.0f} s from the command line "
          f"({'met' if met else 'MISSED'})")
    for line in problems:
        print(f"WRONG PLAN: {line}")
    return 0 if met and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
