#!/usr/bin/env python3
"""Benchmark: 8 lineages x 5 generations, `--parallel 8` against one lineage.

The model is a loopback server speaking the Chat Completions wire format that
waits 2 s per request, like a real model would, and answers with the seed
organism itself (so every generation calls it, and none changes anything).
Targets, each a ratio measured in the same run: the parallel run takes at most
1.3x the time of one lineage's 5 generations; with `--slurm`, the same fleet
through `--executor slurm` (a running cluster: .ci/slurm-up.sh) takes at most
1.5x the local `--parallel 8` run. `--serial` adds the `--parallel 1` run (slow).

    python3 bench/apply_bench.py [--lineages 8] [--generations 5] [--delay 2]
                                 [--serial] [--slurm]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.provider_server import FakeProvider, chat_ok  # noqa: E402

SEED = (ROOT / "reconciler" / "kernel" / "transaction" / "organism.el").read_text()
MAIN = "import sys; from reconciler.cli import console_main; sys.argv[0] = 'ouro'; console_main()"


def write_specs(folder: Path, count: int, generations: int, url: str) -> None:
    folder.mkdir(parents=True)
    for index in range(count):
        (folder / f"l{index}.yaml").write_text(
            "apiVersion: ouro/v1\nkind: Lineage\n"
            f"metadata: {{name: bench-{index}}}\n"
            f"spec:\n  generations: {generations}\n"
            "  model:\n    provider: openai-compatible\n    name: bench-model\n"
            f"    base_url: {url}\n    api_key_env: null\n    budget_usd: \"0.10\"\n"
            "    price: {input_usd_per_mtok: \"0.01\", output_usd_per_mtok: \"0.01\"}\n"
            "  ceilings: {wall: 60s, cpu: 30s, memory: 512MiB}\n"
        )


def apply(specs: Path, state: Path, parallel: int, executor: str = "local") -> float:
    env = dict(os.environ, OURO_STATE_DIR=str(state),
               OURO_INSTRUMENT_COMMIT=os.environ.get("OURO_INSTRUMENT_COMMIT", "b" * 40))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", MAIN, "apply", "--yes", "--parallel",
                           str(parallel), "--executor", executor, str(specs)], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"apply failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lineages", type=int, default=8)
    parser.add_argument("--generations", type=int, default=5)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--serial", action="store_true", help="also run --parallel 1")
    parser.add_argument("--slurm", action="store_true", help="also run --executor slurm")
    args = parser.parse_args()
    load = os.getloadavg()
    reply = dataclasses.replace(chat_ok(SEED), delay=args.delay)
    with FakeProvider(lambda seen, number: reply) as fake, \
            tempfile.TemporaryDirectory(prefix="ouro-bench-") as folder:
        base = Path(folder)
        write_specs(base / "one", 1, args.generations, fake.url)
        write_specs(base / "fleet", args.lineages, args.generations, fake.url)
        one = apply(base / "one", base / "state-one", 1)
        serial = apply(base / "fleet", base / "state-serial", 1) if args.serial else None
        parallel = apply(base / "fleet", base / "state-parallel", args.lineages)
        slurm = (apply(base / "fleet", base / "state-slurm", args.lineages, "slurm")
                 if args.slurm else None)
        requests = len(fake.requests)
    runs = 1 + args.lineages * (1 + int(args.serial) + int(args.slurm))
    expected = runs * args.generations
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"on {os.cpu_count()} CPUs; after: {os.getloadavg()[0]:.2f}")
    print(f"model requests: {requests} (expected {expected}), {args.delay:g} s each")
    print(f"one lineage, {args.generations} generations:        {one:7.2f} s")
    if serial is not None:
        print(f"{args.lineages} lineages, --parallel 1:            {serial:7.2f} s")
    print(f"{args.lineages} lineages, --parallel {args.lineages}:            {parallel:7.2f} s")
    ratio = parallel / one
    ok = ratio <= 1.3 and requests == expected
    print(f"parallel / one lineage = {ratio:.2f}x (target <= 1.30x)")
    if serial is not None:
        print(f"parallel speed-up over --parallel 1 = {serial / parallel:.1f}x")
    if slurm is not None:
        print(f"{args.lineages} lineages, --executor slurm:        {slurm:7.2f} s")
        print(f"slurm / local parallel = {slurm / parallel:.2f}x (target <= 1.50x)")
        ok = ok and slurm / parallel <= 1.5
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
