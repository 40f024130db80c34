"""What one command costs a user is mostly what it imports (docs/benchmarks.md, issue 21):
an in-sync plan or apply of one lineage, in a real process, leaves out every module it
does not use, and ``main`` builds the parser of the one command it runs. No timing here
(targets and numbers live in bench/startup.py); a heavy import that creeps back onto
these paths fails this test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from reconciler.cli import _for, app
from reconciler.state import instrument
from tests.inprocess import ouro
from tests.observe.builder import LineageBuilder
from tests.plan.helpers import spec_yaml, write_specs

ROOT = Path(__file__).resolve().parents[2]
# The command as `ouro` runs it (the console script); at exit, the modules it imported (on
# stderr, last line).
MAIN = ("import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        "from reconciler.cli import console_main\nsys.argv[0] = 'ouro'\nconsole_main()\n")
# Never on an in-sync plan or apply: the terminal's renderer (a pipe gets plain text), the
# providers' HTTP client (no provider is probed), what stores or runs a kernel, the saved
# plan (none is given or written).
NEVER = ("rich", "httpx", "py_compile", "reconciler.engine.pinned", "reconciler.engine.bundle",
         "reconciler.plan.saved")
# Nor on a plan: apply's engine and progress, the web viewer.
NEVER_IN_PLAN = (*NEVER, "reconciler.engine.session",
                 "reconciler.engine.apply", "reconciler.engine.executors",
                 "reconciler.report.progress", "reconciler.viewer")


def _imported(*args: str | Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run([sys.executable, "-c", MAIN, *map(str, args)], cwd=ROOT,
                          env=dict(os.environ), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    modules = json.loads(done.stderr.strip().splitlines()[-1])
    return done, {name for name in modules if isinstance(name, str)}


def _heavy(modules: set[str], never: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(f"{n}.") for n in never))


@pytest.fixture
def in_sync(tmp_path: Path) -> Path:
    """One lineage of two generations and its spec asking for two: in sync."""
    builder = LineageBuilder(tmp_path, "steady", identity=instrument.current())
    builder.gen()
    builder.gen()
    return write_specs(tmp_path / "specs", spec_yaml("steady", builder.paths, generations=2,
                                                     provider="echo", model="echo"))


# Nor on a plan whose lineages are observed from their records (the second plan of a
# lineage that has not moved): the kernel's transaction modules (and tenacity, theirs), the
# history's summaries.
NEVER_FROM_RECORDS = ("reconciler.kernel.transaction", "tenacity", "reconciler.state.summaries")


def test_an_in_sync_plan_imports_only_what_it_uses(in_sync: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"  # (where plan keeps the records it reads: it exists)
    state.mkdir(mode=0o700)
    for args in (("plan", "--json", in_sync, "--state-dir", state),
                 ("plan", in_sync, "--state-dir", state)):
        done, modules = _imported(*args)
        if "--json" not in args:  # (the first plan kept the lineage's record)
            assert _heavy(modules, NEVER_FROM_RECORDS) == []
        assert done.returncode == 0, done.stdout + done.stderr
        assert ("in-sync" in done.stdout and "create" not in done.stdout.split("Plan:")[0]
                if "--json" not in args else
                json.loads(done.stdout)["lineages"][0]["action"] == "in-sync")
        assert _heavy(modules, NEVER_IN_PLAN) == [], args
        # what the plan does use is imported (the check sees the real process)
        assert {"reconciler.engine.fleet", "pygit2", "pydantic"} <= modules


def test_an_in_sync_apply_imports_neither_rich_nor_a_provider(in_sync: Path) -> None:
    done, modules = _imported("apply", "--yes", in_sync)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Applied: 0 generations run" in done.stdout
    assert _heavy(modules, NEVER) == []
    assert "reconciler.engine.session" in modules


def test_main_builds_only_the_command_it_runs() -> None:
    """typer builds every parameter of every command it is given: ``main`` gives it the
    one its arguments name, no command for --version, and the whole app for help, an
    unknown command or an option first."""
    plan = _for(["plan", "specs", "--json"])
    assert [info.name for info in plan.registered_commands] == ["plan"]
    assert plan.registered_groups == [] and plan.registered_callback is app.registered_callback
    kernel = _for(["kernel", "list"])
    assert kernel.registered_commands == [] and len(kernel.registered_groups) == 1
    for version in (["--version"], ["-V", "plan"]):
        narrow = _for(version)
        assert narrow.registered_commands == [] and narrow.registered_groups == []
    for whole in ([], ["-h"], ["bogus"], ["--bogus", "plan"], ["--", "plan"]):
        assert _for(whole) is app
    assert len(app.registered_commands) > 10  # the tests' and help's app is whole


def test_main_has_typer_build_the_one_command_it_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    built: list[str | None] = []
    build = typer.main.get_command_from_info

    def counted(command_info: typer.models.CommandInfo, **options: Any) -> Any:
        built.append(command_info.name)
        return build(command_info, **options)

    monkeypatch.setattr(typer.main, "get_command_from_info", counted)
    code, out, _ = ouro(monkeypatch, capsys, "schema")
    assert code == 0 and json.loads(out)["title"]
    assert built == ["schema"]
