"""The ``ouro`` console script (``reconciler.cli.console_main``): a brief command's process
ends without the interpreter's teardown, and nothing a user or a library counts on at exit
is lost: the output whole, the exit code, the exit handlers run (once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.state import instrument
from tests.observe.builder import LineageBuilder
from tests.plan.helpers import spec_yaml, write_specs

ROOT = Path(__file__).resolve().parents[2]
# `ouro` as the console script runs it, with an exit handler that writes to both outputs
# (unbuffered output would hide a lost flush: the handler's lines are buffered).
SCRIPT = ("import atexit, sys\n"
          "def bye():\n"
          "    sys.stdout.write('bye out\\n')\n"
          "    sys.stderr.write('bye err\\n')\n"
          "atexit.register(bye)\n"
          "from reconciler.cli import console_main\nsys.argv[0] = 'ouro'\nconsole_main()\n")


def _run(*args: str | Path, before: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run([sys.executable, "-c", before + SCRIPT, *map(str, args)], cwd=ROOT,
                          env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    """Two lineages: one in sync at two generations, one to create."""
    builder = LineageBuilder(tmp_path, "steady", identity=instrument.current())
    builder.gen()
    builder.gen()
    return write_specs(tmp_path / "specs",
                       spec_yaml("steady", builder.paths, generations=2, provider="echo",
                                 model="echo"),
                       "apiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: fresh}\n"
                       "spec:\n  generations: 1\n  model: {provider: echo, name: echo}\n")


def test_a_plan_ends_with_its_output_whole_its_code_and_the_exit_handlers_run(
        specs: Path, tmp_path: Path) -> None:
    done = _run("plan", "--json", specs, "--state-dir", tmp_path / "state")
    assert done.returncode == 2, done.stderr  # changes pending
    document, _, after = done.stdout.rpartition("}\n")
    assert after == "bye out\n"  # the handler ran after the plan, its line flushed
    plan = json.loads(document + "}")
    assert {item["name"]: item["action"] for item in plan["lineages"]} == {
        "steady": "in-sync", "fresh": "create"}
    assert done.stderr == "bye err\n"  # once


def test_an_in_sync_plan_exits_zero(specs: Path, tmp_path: Path) -> None:
    done = _run("plan", specs, "--select", "steady", "--state-dir", tmp_path / "state")
    assert done.returncode == 0, done.stderr
    assert "in-sync" in done.stdout and done.stdout.endswith("bye out\n")


def test_a_refused_spec_exits_one_with_its_reason(tmp_path: Path) -> None:
    bad = write_specs(tmp_path / "specs", "apiVersion: ouro/v1\nkind: Lineage\n")
    done = _run("validate", bad)
    assert done.returncode == 1
    assert "metadata" in done.stderr and done.stderr.endswith("bye err\n")
    assert done.stdout.endswith("bye out\n")


def test_a_usage_error_keeps_its_code() -> None:
    done = _run("plan", "--bogus")
    assert done.returncode == 2
    assert "No such option" in done.stderr and done.stderr.endswith("bye err\n")


def test_other_commands_exit_as_python_does() -> None:
    done = _run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ouro ") and done.stdout.endswith("bye out\n")
    assert done.stderr == "bye err\n"


def test_a_thread_still_running_is_waited_for_as_python_does(tmp_path: Path) -> None:
    late = ("import sys, threading, time\n"
            "threading.Thread(target=lambda: (time.sleep(0.5), print('late', file=sys.stderr,"
            " flush=True))).start()\n")
    bad = write_specs(tmp_path / "specs", "apiVersion: ouro/v1\nkind: Lineage\n")
    done = _run("validate", bad, before=late)
    assert done.returncode == 1
    assert "late\n" in done.stderr  # the interpreter's exit waited for the thread


def test_other_commands_finalize_what_dies_with_its_module(tmp_path: Path) -> None:
    """Why an apply's process keeps the interpreter's whole exit, ~30 ms of it: skipping the
    collector's last pass over what is alive (``gc.freeze``, tried) leaves a module's open
    file unflushed, a library's as well as ours."""
    kept = tmp_path / "kept"
    before = (f"kept = open({str(kept)!r}, 'w')\n"
              "kept.write('written at exit')\n"
              "def a_function_so_the_module_is_a_cycle():\n"
              "    pass\n")
    done = _run("--version", before=before)
    assert done.returncode == 0, done.stderr
    assert kept.read_text() == "written at exit"
