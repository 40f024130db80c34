"""Measure run_sandbox against a bare `bwrap ... emacs -Q --batch` (not a test: run it).

    python tests/kernel_sandbox/measure_overhead.py [ROUNDS]

Prints the median wall time of: the bare bwrap + emacs start; the same with the
kernel's full bwrap arguments (namespaces, tmpfs sizes, read-only root); run_sandbox with the
CPU quota at 100 % (kernel overhead only); run_sandbox with the default ceilings
(20 % quota: the throttling is physics, not overhead); and the parts of the kernel's
own work (open_scope, close).
"""

from __future__ import annotations

import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

from reconciler.kernel.base.config import Ceilings
from reconciler.kernel.sandbox.ceilings import open_scope
from reconciler.kernel.sandbox.life import bwrap_argv, run_sandbox

ORGANISM = b'(message "alive")\n'
BARE = ["bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink",
        "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--ro-bind",
        "/etc/alternatives", "/etc/alternatives", "--tmpfs", "/work", "--proc", "/proc",
        "--dev", "/dev", "--unshare-net", "--unshare-pid", "--chdir", "/work", "--",
        "emacs", "-Q", "--batch", "--eval", '(message "alive")']


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        kernel = Path(folder)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
            info = tarfile.TarInfo("organism.el")
            info.size = len(ORGANISM)
            tar.addfile(info, io.BytesIO(ORGANISM))
        (kernel / "input.tar").write_bytes(buffer.getvalue())
        full = Ceilings(cpu_seconds=600, wall_seconds=600, enforcement="cgroup1")
        default = Ceilings(enforcement="cgroup1")
        times: dict[str, list[float]] = {k: [] for k in (
            "bare", "bwrap-our-args", "sandbox-100%", "sandbox-20%", "open", "close")}
        ours = bwrap_argv(kernel_dir=kernel, ceilings=full)
        ours = [*ours[: ours.index("--") + 1], "emacs", "-Q", "--batch", "--eval",
                '(message "alive")']
        for _ in range(rounds):
            start = time.perf_counter()
            subprocess.run(BARE, check=True, capture_output=True)
            times["bare"].append(time.perf_counter() - start)
            start = time.perf_counter()
            subprocess.run(ours, check=True, capture_output=True)
            times["bwrap-our-args"].append(time.perf_counter() - start)
            for key, ceilings in (("sandbox-100%", full), ("sandbox-20%", default)):
                start = time.perf_counter()
                result = run_sandbox(kernel_dir=kernel, ceilings=ceilings,
                                     scope_name=f"measure-{uuid.uuid4().hex[:12]}")
                times[key].append(time.perf_counter() - start)
                assert result.exit_status == 0, result.stderr
            start = time.perf_counter()
            scope = open_scope(full, f"measure-{uuid.uuid4().hex[:12]}")
            times["open"].append(time.perf_counter() - start)
            start = time.perf_counter()
            scope.close()
            times["close"].append(time.perf_counter() - start)
        for key, samples in times.items():
            print(f"{key:14} median {median_ms(samples):7.1f} ms  "
                  f"min {min(samples) * 1000:7.1f} ms  (n={len(samples)})")
        overhead = statistics.median(times["sandbox-100%"]) - statistics.median(times["bare"])
        print(f"kernel overhead (sandbox-100% - bare): {overhead * 1000:.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
