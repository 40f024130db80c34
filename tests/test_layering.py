"""The layers are a test: the kernel imports nothing above it; the planner does no I/O;
nothing in the reconciler shells out to git."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "reconciler"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


KERNEL_FILES = sorted((PACKAGE / "kernel").glob("*.py"))


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_kernel_imports_nothing_from_the_rest_of_reconciler(path: Path) -> None:
    outside = {m for m in _imports(path)
               if m.startswith("reconciler") and not m.startswith("reconciler.kernel")}
    assert not outside, f"{path.name} imports {sorted(outside)}: the kernel must stand alone"


def test_plan_is_pure() -> None:
    path = PACKAGE / "plan" / "planner.py"
    if not path.exists():
        pytest.fail("reconciler/plan/planner.py is missing")
    forbidden = _imports(path) & {"os", "subprocess", "pygit2", "shutil", "socket", "httpx",
                                  "reconciler.state.observe", "reconciler.engine.apply"}
    assert not forbidden, f"plan.py imports {sorted(forbidden)}: planning is pure"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_no_git_subprocess(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for needle in ('["git"', "['git'", '"git",', "'git',"):
        assert needle not in text, f"{path.name} runs git as a subprocess: use pygit2"
