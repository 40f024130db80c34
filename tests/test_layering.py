"""The layers are a test: import-linter's contracts (pyproject.toml, [tool.importlinter])
hold, and nothing in the reconciler shells out to git."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "reconciler"
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; " \
               "sys.exit(lint_imports_command())"


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def test_the_import_contracts_hold() -> None:
    if importlib.util.find_spec("importlinter") is None:  # in THIS interpreter, not on PATH
        pytest.fail("import-linter is not installed: pip install -e '.[test]'")
    done = subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = [line for line in done.stdout.splitlines() if line.endswith(" KEPT")]
    assert len(kept) == len(_contracts()), done.stdout


def test_the_contracts_cover_every_layer() -> None:
    """A new layer folder must be placed in the layers contract, or it is unchecked."""
    (layers,) = [c for c in _contracts()
                 if c["type"] == "layers" and "containers" not in c]
    named = {part.strip() for layer in layers["layers"]  # type: ignore[attr-defined]
             for part in str(layer).split("|")}
    folders = {f"reconciler.{p.name}" for p in PACKAGE.iterdir()
               if (p / "__init__.py").is_file()}
    assert folders == named


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_no_git_subprocess(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for needle in ('["git"', "['git'", '"git",', "'git',"):
        assert needle not in text, f"{path.name} runs git as a subprocess: use pygit2"
