#!/usr/bin/env python3
"""The selection step of a 1,000-member set, one command:
`python bench/selection_bench.py [--members N] [--rounds R]`.

Times ``reconciler.plan.selection.decide`` (the pure decision: rank, choose, name the
new members) for each method over N hand-made candidates, best of R rounds. Target:
< 0.5 s for 1,000 members (issue 39). Reading the table the candidates come from is
the table's own cost (``bench/history_bench.py``), not timed here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.plan.selection import Candidate, decide, rng
from reconciler.spec.selection import SelectionSpec

TARGET_SECONDS = 0.5
BY = "probe.size.bytes"
RULES: dict[str, dict[str, Any]] = {
    "truncation": {"keep": 500},
    "tournament": {"tournament": {"size": 3}},
    "map-elites": {"map-elites": {"descriptors": [
        {"by": "organism_bytes", "bins": [float(b) for b in range(100, 10_000, 100)]}]}},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    candidates = [Candidate(f"pop-{i}", 2, {BY: float((i * 7919) % 1009),
                                            "organism_bytes": float((i * 104729) % 10_000)})
                  for i in range(args.members)]
    worst = 0.0
    for method, fields in RULES.items():
        rule = SelectionSpec.model_validate({"every": 2, "epochs": 3, "by": BY, "seed": 7,
                                             "method": method, **fields})
        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            decide(candidates, rule, 1, rng(7, 1), set_name="pop", size=args.members)
            times.append(time.perf_counter() - start)
        worst = max(worst, min(times))
        print(f"{method:10s} {args.members} members: {min(times) * 1000:.1f} ms")
    print(f"slowest: {worst:.3f} s (target < {TARGET_SECONDS} s)")
    return 0 if worst < TARGET_SECONDS else 1


if __name__ == "__main__":
    raise SystemExit(main())
