#!/usr/bin/env python3
"""Run every benchmark in this folder, one after another: `python3 bench/run.py [NAME...]`.

Each benchmark measures its baseline in the same run and prints the ratio
against it and whether its target was met; this runner only sequences them and
exits non-zero if any of them failed or missed its target. A benchmark is a script
that runs as a program (``if __name__ == "__main__":``); the others here
(``replay_lineage.py``) are helpers the benchmarks import, never run on their own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benchmarks() -> list[Path]:
    """The scripts of this folder that are programs: every benchmark, no helper."""
    return sorted(
        p for p in HERE.glob("*.py")
        if p.name != "run.py" and not p.name.startswith("_")
        and 'if __name__ == "__main__":' in p.read_text(encoding="utf-8")
    )


def main(selected: list[str]) -> int:
    scripts = benchmarks()
    unknown = sorted(set(selected) - {p.stem for p in scripts})
    if unknown:
        print(f"no such benchmark: {', '.join(unknown)} "
              f"(there are: {', '.join(p.stem for p in scripts)})", file=sys.stderr)
        return 2
    if selected:
        scripts = [p for p in scripts if p.stem in selected]
    failed = []
    for script in scripts:
        print(f"== {script.stem}", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode != 0:
            failed.append(script.stem)
    if failed:
        print(f"missed or failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
