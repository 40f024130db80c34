#!/usr/bin/env python3
"""Benchmark `ouro compare` of a LineageSet of 1,000 members (2 cells x 500 replicas) x 100
generations, with one probe measured at every generation and the seed.

One command: `python bench/compare_bench.py [--cells C] [--replicas R] [--generations G]
[--rounds N]`.

The members' lineages are written once with plan_bench.py's builder (docs/lineage-
contract.md's formats, pygit2, a fixed instrument) at the set's default places, each with
its probe records on ``probes/<lineage branch>`` in the layout ``reconciler.state.probes``
reads (two commits per lineage: every record but the newest generation's, then that one,
as after an apply's back-fill and its newest generation; the newest commit's objects are
what a reader checks whole), cached under the temp folder's ouro-bench/. The probe's value
is the replica's index plus 10 x the cell's (the cells differ by construction). Measured
as fresh processes (imports included, scipy too: what a user waits for), best of N: `ouro
compare SET.yaml --metric probe.score.value --json` at the last generation, and the same
in text. Also, in this process: reading the rows (``engine.compare_rows.lineage_rows``)
and the statistics (``report.statistics.compare_at``) apart. Exits 1 if a result is wrong
(each cell's n is its replica count; the means are the replicas' mean index plus 10 x the
cell's) or the command takes 2 s or more.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import plan_bench  # noqa: E402  (sets OURO_INSTRUMENT_COMMIT: the fleet's fixed instrument)
import pygit2  # noqa: E402

from reconciler.spec.load import load_specs  # noqa: E402

FORMAT = 1  # bump when the lineages' layout changes
RECORDS = 2  # bump when the probe records' layout changes (rewritten alone)
TARGET_SECONDS = 2.0
METRIC = "probe.score.value"


def _set_text(cells: int, replicas: int, generations: int) -> str:
    values = ", ".join(str(cpus) for cpus in range(1, cells + 1))
    return ("apiVersion: ouro/v1\nkind: LineageSet\nmetadata: {name: bench}\nspec:\n"
            f"  replicas: {replicas}\n  matrix:\n    executor.slurm.cpus: [{values}]\n"
            f"  template:\n    generations: {generations}\n"
            "    model: {provider: echo, name: echo}\n"
            "    probes:\n      - {name: score, run: [/bin/true]}\n")


def _blob(repo: pygit2.Repository, value: object) -> pygit2.Oid:
    return repo.create_blob((json.dumps(value, indent=2, sort_keys=True) + "\n").encode())


def write_records(args: tuple[Path, str, str, dict[str, object], float]) -> None:
    """One lineage's probe records, generation 0 to G, in two commits on its probe branch
    (the last generation's alone in the second); the branch is set afresh."""
    state, name, digest, probe, offset = args
    from reconciler.kernel.base.config import LineagePaths
    from reconciler.state import probes as stored

    paths = LineagePaths(worktree=state / name, git_dir=state / f"{name}.git",
                         observations=state / f"{name}.observations",
                         branch=f"lineage-{name}",
                         observation_branch=f"observations/lineage-{name}", name=name)
    commits = [stored.seed_commit(paths), *stored.generation_commits(paths)]
    repo = pygit2.Repository(str(paths.observations))
    generations = repo.TreeBuilder()
    blob = pygit2.enums.FileMode.BLOB
    signature = pygit2.Signature("ouro", "ouro@invalid", 1_700_000_000, 0)
    parents: list[pygit2.Oid] = []
    for number, commit in enumerate(commits):
        generations.insert(stored.record_name(number), _blob(repo, {
            "probe": "score", "digest": digest, "generation": number, "commit": commit,
            "metrics": {"value": offset + number / 100}, "failure": None, "exit": 0,
            "wall_ms": 5, "cpu_ms": 1, "peak_memory_bytes": 1 << 20, "stderr_tail": ""}),
            blob)
        if number < len(commits) - 2:
            continue
        folder = repo.TreeBuilder()
        folder.insert(stored.PROBE_FILE, _blob(repo, probe), blob)
        folder.insert(stored.GENERATIONS, generations.write(), pygit2.enums.FileMode.TREE)
        top = repo.TreeBuilder()
        top.insert(digest, folder.write(), pygit2.enums.FileMode.TREE)
        parents = [repo.create_commit(None, signature, signature,
                                      f"probe score {digest[:12]}: gen {number}\n",
                                      top.write(), parents)]
    repo.references.create(f"refs/heads/{stored.probe_branch(paths.branch)}", parents[0],
                           force=True)


def build(cells: int, replicas: int, generations: int) -> Path:
    # Outside the checkout: ouro refuses lineages on the host Python's path (bench/ is).
    root = (Path(tempfile.gettempdir()) / "ouro-bench"
            / f"compare-v{FORMAT}-C{cells}-R{replicas}-G{generations}")
    if (root / ".complete").exists():
        if not (root / f".records-v{RECORDS}").exists():
            _records(root, load_specs([root / "set.yaml"], state_dir=root / "lineages"))
        return root
    if root.exists():
        shutil.rmtree(root)
    state = root / "lineages"
    state.mkdir(parents=True)
    (root / "set.yaml").write_text(_set_text(cells, replicas, generations), encoding="utf-8")
    members = load_specs([root / "set.yaml"], state_dir=state)
    started = time.perf_counter()
    jobs = [(state, spec.name, generations, 0, "loose") for spec in members]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(plan_bench.build_lineage, jobs, chunksize=16))
    _records(root, members)
    (root / ".complete").write_text(f"{time.perf_counter() - started:.1f}s\n")
    return root


def _records(root: Path, members: list[Any]) -> None:
    """Every member's probe records (``write_records``), in parallel."""
    probe = members[0].probes[0]
    records = []
    for spec in members:
        cell = spec.spec.spec.executor.slurm.cpus  # 1..C
        records.append((root / "lineages", spec.name, probe.digest, probe.describe(),
                        10.0 * cell + spec.member.replica))
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(write_records, records, chunksize=16))
    (root / f".records-v{RECORDS}").write_text("done\n")


def run(root: Path, *extra: str) -> tuple[float, int, str, float]:
    """Wall seconds, exit code, stdout and CPU seconds of one `ouro compare`."""
    cpu = plan_bench.children_cpu()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", plan_bench.PIN, "compare",
                           str(root / "set.yaml"), "--metric", METRIC,
                           "--state-dir", str(root / "lineages"), *extra],
                          cwd=ROOT, capture_output=True, text=True, check=False,
                          env=plan_bench.cli_env())
    return (time.perf_counter() - started, done.returncode, done.stdout + done.stderr,
            plan_bench.children_cpu() - cpu)


def parts(root: Path) -> dict[str, float]:
    """In this process: the rows read, and the statistics computed (wall seconds)."""
    from reconciler.engine.compare_rows import lineage_rows
    from reconciler.report.compare import members_of
    from reconciler.report.statistics import compare_at

    started = time.perf_counter()
    found = lineage_rows([root / "set.yaml"], None, root / "lineages", {METRIC})
    read = time.perf_counter() - started
    members = members_of(found, METRIC, None)
    started = time.perf_counter()
    compare_at(members, max(item.last or 0 for item in found))
    return {"rows": read, "statistics": time.perf_counter() - started}


def problems_of(output: str, cells: int, replicas: int, generations: int) -> list[str]:
    try:
        document = json.loads(output)
    except ValueError:
        return [f"not a JSON document: {output[:300]}"]
    found = []
    if document.get("generation") != generations:
        found.append(f"compared at {document.get('generation')}, not {generations}")
    groups = document.get("groups", [])
    if len(groups) != cells:
        found.append(f"{len(groups)} groups, not {cells}")
    for index, group in enumerate(groups, start=1):
        expected = 10 * index + (replicas - 1) / 2 + generations / 100
        if group.get("n") != replicas or abs(group.get("mean", 0) - expected) > 1e-6:
            found.append(f"{group.get('group')}: n {group.get('n')}, mean "
                         f"{group.get('mean')} (expected {replicas}, {expected})")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=2)
    parser.add_argument("--replicas", type=int, default=500)
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    root = build(options.cells, options.replicas, options.generations)
    count = options.cells * options.replicas
    print(f"set: {options.cells} cells x {options.replicas} replicas = {count} members x "
          f"{options.generations} generations, one probe, at {root} "
          f"(built in {(root / '.complete').read_text().strip()})")
    run(root, "--json")  # warm-up: byte code written, summaries cached (as after an apply)
    before = plan_bench.load_average()
    as_json = [run(root, "--json") for _ in range(options.rounds)]
    text = [run(root) for _ in range(options.rounds)]
    problems = [f"ouro compare exited {code}: {out[:300]}"
                for _, code, out, _ in (*as_json, *text) if code != 0][:3]
    problems += problems_of(as_json[-1][2], options.cells, options.replicas,
                            options.generations)
    j, t = (min(wall for wall, _, _, _ in runs) for runs in (as_json, text))
    jc, tc = (min(cpu for _, _, _, cpu in runs) for runs in (as_json, text))
    print(f"`ouro compare set.yaml --metric {METRIC} --json`: {j:.3f} s (CPU {jc:.3f} s)")
    print(f"`ouro compare set.yaml --metric {METRIC}` (text): {t:.3f} s (CPU {tc:.3f} s)")
    print(f"load average before/after: {before} / {plan_bench.load_average()}")
    print("in process: " + ", ".join(f"{name} {value:.3f} s"
                                      for name, value in parts(root).items()))
    met = max(j, t) < TARGET_SECONDS
    print(f"target: < {TARGET_SECONDS:.0f} s from the command line "
          f"({'met' if met else 'MISSED'})")
    for line in problems:
        print(f"WRONG: {line}")
    return 0 if met and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
