"""CI runs every test for what it asserts: under ``CI`` a skip or an xfail is a failure.

The rule lives in tests/conftest.py (a report hook) and tests/host.py (``require``);
`.ci/run` sets ``CI`` itself, so any runner, or a developer running it by hand, gets it.
These tests run a tiny suite with this conftest in a pytest of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TINY = '''
import pytest

def test_passes():
    assert 1 + 1 == 2

def test_fails():
    assert 1 + 1 == 3

def test_skips():
    pytest.skip("the host lacks it")

@pytest.mark.xfail(reason="a known bug")
def test_expected_to_fail():
    assert 1 + 1 == 3

@pytest.mark.xfail(reason="a bug since fixed")
def test_expected_to_fail_but_passes():
    assert 1 + 1 == 2

def test_imperative_xfail():
    pytest.xfail("not now")
'''


def _run_tiny(tmp_path: Path, ci: str | None) -> dict[str, str]:
    """Each tiny test's outcome (``PASSED``, ``FAILED``, ``SKIPPED``, ``XFAIL``, ``XPASS``)."""
    folder = tmp_path / ("ci" if ci else "local")
    folder.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", folder / "conftest.py")
    (folder / "test_tiny.py").write_text(TINY)
    (folder / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-c",
         str(folder / "pytest.ini"), "--rootdir", str(folder), str(folder / "test_tiny.py")],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    outcomes = {}
    for line in done.stdout.splitlines():
        found = re.match(r"\S*::(test_\w+) (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)", line)
        if found:
            outcomes[found[1]] = found[2]
    assert outcomes, done.stdout + done.stderr
    return outcomes


def test_outside_ci_skips_and_xfails_stay_what_they_are(tmp_path: Path) -> None:
    assert _run_tiny(tmp_path, None) == {
        "test_passes": "PASSED", "test_fails": "FAILED", "test_skips": "SKIPPED",
        "test_expected_to_fail": "XFAIL", "test_expected_to_fail_but_passes": "XPASS",
        "test_imperative_xfail": "XFAIL",
    }


def test_under_ci_a_skip_or_an_xfail_fails(tmp_path: Path) -> None:
    assert _run_tiny(tmp_path, "true") == {
        "test_passes": "PASSED", "test_fails": "FAILED", "test_skips": "FAILED",
        "test_expected_to_fail": "FAILED", "test_expected_to_fail_but_passes": "FAILED",
        "test_imperative_xfail": "FAILED",
    }


def test_ci_run_sets_ci_itself_before_the_tests() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    exported = re.search(r"^export CI=(\S+)$", script, re.M)
    assert exported and exported[1] not in ("", '""', "''", "0"), ".ci/run must export CI"
    assert exported.start() < script.index("-m pytest"), "CI must be set before pytest runs"
