#!/usr/bin/env python3
"""What a pinned kernel costs: one generation through the kernel store's entry point
(a subprocess, ``python -I`` running ``ouro_kernel_<fingerprint>`` as
``kernel.base.launch`` does) vs. the same kernel in-process.

One command: `python bench/pinned_kernel.py [--rounds N]`.

One fresh lineage, the seed organism, the offline ``replay`` provider (each
generation asks once and ends as no-change), real broker, bwrap and ceilings at
a full core. The store holds an exact copy of this kernel, so both ways run
the same physics on the same lineage; they alternate, so both see the same
machine. Prints both medians and the difference; target: at most 0.05 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_lineage import replay_lineage

from reconciler.engine.kernel_store_writer import run_record, store_running
from reconciler.engine.pinned import PinnedKernel
from reconciler.kernel.base.config import Ceilings
from reconciler.kernel.transaction.generation import run_generation
from reconciler.state.kernel_store import KernelStore

TARGET_S = 0.05


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    ceilings = Ceilings(cpu_seconds=600)  # a full core: measure the kernel, not the quota
    with tempfile.TemporaryDirectory(prefix="ouro-bench-") as folder:
        root = Path(folder)
        paths, identity, model = replay_lineage(root, 2 * args.rounds + 4)
        store = KernelStore(root / "kernels")
        # as apply runs it: a spare process imports the kernel while a generation runs
        pinned = PinnedKernel(store, store_running(store, identity), spare=True)
        record = run_record(identity.commit, identity.fingerprint, "store", identity)

        def in_process() -> float:
            began = time.monotonic()
            outcome = run_generation(paths=paths, identity=identity, model=model,
                                     ceilings=ceilings, api_key=None, ran_with=record)
            assert outcome.outcome == "no-change", outcome
            return time.monotonic() - began

        def through_entry() -> float:
            began = time.monotonic()
            outcome = pinned.generation(paths=paths, identity=identity, model=model,
                                        ceilings=ceilings, api_key=None, provenance=None,
                                        cancel=None, ran_with=record)
            assert outcome.outcome == "no-change", outcome
            return time.monotonic() - began

        in_process()  # warm: imports, page cache, the entry's byte code
        through_entry()
        local, remote = [], []
        for _ in range(args.rounds):
            local.append(in_process())
            remote.append(through_entry())
        pinned.close()

    base, pinned_s = statistics.median(local), statistics.median(remote)
    extra = pinned_s - base
    print(f"one generation, in-process kernel: median {base:.3f} s  (min {min(local):.3f})")
    print(f"one generation, pinned kernel (entry point): median {pinned_s:.3f} s  "
          f"(min {min(remote):.3f})")
    print(f"extra per generation: {extra:.3f} s (target <= {TARGET_S:.2f} s): "
          f"{'met' if extra <= TARGET_S else 'MISSED'}")
    return 0 if extra <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
