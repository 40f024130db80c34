"""The benchmarks' runner and imports: `bench/run.py` runs benchmarks, never their
helpers, and every benchmark loads in a venv without the test runner (pytest)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def _runner() -> object:
    """bench/run.py as a module (bench/ is no package: loaded from its file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_runner_runs_benchmarks_not_their_helpers() -> None:
    run = _runner()
    names = [p.stem for p in run.benchmarks()]  # type: ignore[attr-defined]
    assert "replay_lineage" not in names  # imported by two benchmarks, runs nothing itself
    assert {"plan_bench", "generation_overhead", "history_bench", "startup", "apply_bench",
            "index_bench", "pinned_kernel"} <= set(names)


def test_the_runner_refuses_a_name_that_is_no_benchmark() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "run.py"), "replay_lineage"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "no such benchmark: replay_lineage" in done.stderr


def _every_import(script: Path) -> list[str]:
    """The modules a script imports anywhere, inside functions too (history_bench loads
    its browser only when it measures the paint)."""
    found = []
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return sorted(set(found) - {"__future__"})


@pytest.mark.parametrize("name", ["plan_bench", "history_bench", "apply_bench",
                                  "generation_overhead", "pinned_kernel", "startup",
                                  "index_bench", "replay_lineage", "set_bench", "fleet_scale",
                                  "controller_idle", "compare_bench"])
def test_each_benchmark_loads_without_pytest(name: str) -> None:
    """Every module a benchmark imports, lazily too, loads with `import pytest` failing as
    in a venv without the test extra."""
    modules = _every_import(BENCH / f"{name}.py")
    code = ("import importlib, sys; sys.modules['pytest'] = None; sys.argv = ['x']; "
            f"sys.path[:0] = [{str(ROOT)!r}, {str(BENCH)!r}]; "
            f"[importlib.import_module(m) for m in {modules!r}]")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
