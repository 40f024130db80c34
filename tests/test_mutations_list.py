"""The mutation check's list (tests/mutations.py) is well formed: each old text occurs
once in its file and the mutated file is still Python, each claimed test file exists,
names are unique, and the sandbox's isolation is never a target. (Running the mutations
is the script's job, not this test's: docs/architecture.md.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import mutations


@pytest.mark.parametrize("mutation", mutations.MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_applies_once_and_claims_tests(mutation: mutations.Mutation) -> None:
    mutations.check(mutation)


def test_names_are_unique_and_each_area_is_covered() -> None:
    names = [m.name for m in mutations.MUTATIONS]
    assert len(names) == len(set(names))
    claimed = " ".join(t for m in mutations.MUTATIONS for t in m.tests)
    for area in ("tests/controller/", "tests/probes/", "tests/sets/", "tests/forks/",
                 "tests/selection/", "tests/compare/", "tests/reproduce/",
                 "tests/history/", "tests/export_mlflow/"):
        assert area in claimed, area


def test_the_isolation_and_a_text_not_there_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "reconciler" / "kernel" / "sandbox" / "life.py"
    target.parent.mkdir(parents=True)
    target.write_text("x = 1\n")
    isolation = mutations.Mutation("off", "reconciler/kernel/sandbox/life.py", "x = 1",
                                   "x = 2", ("tests/test_x.py",), "")
    with pytest.raises(mutations.ListError, match="never mutated"):
        mutations.check(isolation, tmp_path)
    (tmp_path / "a.py").write_text("x = 1\nx = 1\n")
    twice = mutations.Mutation("twice", "a.py", "x = 1", "x = 2", ("a.py",), "")
    with pytest.raises(mutations.ListError, match="occurs 2 times"):
        mutations.check(twice, tmp_path)
    broken = mutations.Mutation("broken", "a.py", "x = 1\nx", "x = (\nx", ("a.py",), "")
    with pytest.raises(mutations.ListError, match="no Python"):
        mutations.check(broken, tmp_path)


def test_a_mutation_is_caught_only_when_every_claimed_test_fails() -> None:
    mutation = mutations.Mutation("m", "a.py", "x", "y", ("t.py::a", "t.py::b"), "")
    both = mutations.Ran(1, 1.0, "", ("t.py::a", "t.py::b[case-2]"))
    assert mutations.missed(mutation, both) == []
    one = mutations.Ran(1, 1.0, "", ("t.py::a", "t.py::bb"))
    assert mutations.missed(mutation, one) == ["t.py::b"]
    assert mutations.missed(mutation, mutations.Ran(-1, 300.0, "timed out", ())) == []


def test_a_python_without_the_test_dependencies_is_told_what_to_do() -> None:
    """`python3 tests/mutations.py` by an interpreter without pytest and pygit2 (here:
    site-packages off), told not to run itself again: a sentence and exit 2, never a
    traceback."""
    script = Path(mutations.__file__).resolve()
    done = subprocess.run([sys.executable, "-S", str(script), "target-reached-twice"],
                          cwd=script.parents[1], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OURO_MUTATIONS_IN_VENV": "1"}, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "has no pytest or pygit2" in done.stderr and "README's test command" in done.stderr
    assert "Traceback" not in done.stderr
