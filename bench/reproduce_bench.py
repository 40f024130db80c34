#!/usr/bin/env python3
"""Benchmark `ouro reproduce` against running the same generations (issue 40).

One command: `python bench/reproduce_bench.py [--generations N] [--rounds R]` (default 100
generations, 3 rounds). A replay
lineage of N generations (each asks once and installs the seed again with one more comment
line, so every generation is `changed`) is run by `ouro apply` as a fresh process, then
reproduced by `ouro reproduce` as a fresh process, on the same host in the same run, in a
temporary state dir; R rounds, each a fresh lineage, apply and reproduction alternating, the
best of each kept (a shared host's load falls on either). Printed: the apply's wall time,
the sum of the generations' own wall times (their observations' `duration_ms`), the
reproduction's wall time, and the ratio reproduction / apply. Target: at most 1.2x.
Exits 1 if the target is missed or the reproduction does not come out as `reproduced N
of N generations`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reconciler.kernel.transaction.lineage import ORGANISM  # noqa: E402

MAIN = "import sys; from reconciler.cli import console_main; sys.argv[0] = 'ouro'; console_main()"
TARGET = 1.2
SPEC = """apiVersion: ouro/v1
kind: Lineage
metadata:
  name: bench
spec:
  generations: {generations}
  model:
    provider: replay
    replay: replies
  ceilings: {{wall: 120s, cpu: 60s, memory: 512MiB}}
"""


def _ouro(env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MAIN, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    return time.perf_counter() - started, done


def _generation_seconds(state: Path, generations: int) -> float:
    import pygit2

    repo = pygit2.Repository(str(state / "bench.observations"))
    tree = repo.revparse_single("observations/lineage-bench").peel(pygit2.Commit).tree
    return sum(json.loads(repo[tree["generations"][f"{n:04d}.json"].id].data)["duration_ms"]
               for n in range(1, generations + 1)) / 1000


def _round(generations: int) -> tuple[float, float, float, str]:
    """One fresh lineage applied, then reproduced: (apply s, lives s, reproduce s, first
    line the reproduction printed)."""
    with tempfile.TemporaryDirectory(prefix="ouro-reproduce-bench-") as folder:
        root = Path(folder)
        (root / "replies").mkdir()
        seed = ORGANISM.read_text()
        for number in range(1, generations + 1):
            (root / "replies" / f"{number:06d}").write_text(seed + f"\n;; form {number + 1}\n")
        (root / "bench.yaml").write_text(SPEC.format(generations=generations))
        env = {**os.environ, "OURO_STATE_DIR": str(root / "state")}
        ran, applied = _ouro(env, "apply", "-y", "--no-provider-check", str(root / "bench.yaml"))
        if applied.returncode != 0:
            raise SystemExit(applied.stdout + applied.stderr)
        lives = _generation_seconds(root / "state", generations)
        again, reproduced = _ouro(env, "reproduce", "bench")
    return ran, lives, again, (reproduced.stdout.splitlines() or [reproduced.stderr])[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    generations = options.generations
    rounds = [_round(generations) for _ in range(options.rounds)]
    for ran, lives, again, _ in rounds:
        print(f"  round: apply {ran:.2f} s (lives {lives:.2f} s), reproduce {again:.2f} s")
    ran, lives, again = (min(r[0] for r in rounds), min(r[1] for r in rounds),
                         min(r[2] for r in rounds))
    ratio = again / ran
    print(f"{generations} generations, best of {len(rounds)}: ouro apply {ran:.2f} s (the "
          f"generations themselves {lives:.2f} s), ouro reproduce {again:.2f} s: "
          f"{ratio:.2f}x (target <= {TARGET}x)")
    wanted = f"reproduced {generations} of {generations} generations"
    wrong = [line for *_, line in rounds if line != wanted]
    if wrong:
        print(f"wrong: {wrong[0]}")
        return 1
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
