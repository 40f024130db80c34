"""The distribution as a package index would receive it: an sdist and a wheel built from
the checkout, each passing `twine check --strict` with the metadata an index shows.

ouro is not published; this keeps it ready to be, under its own name (ouro-lineages:
"ouro" on the index is another project).
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _built(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "dist"
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = out.glob("ouro_lineages-*.tar.gz")
    (wheel,) = out.glob("ouro_lineages-*-py3-none-any.whl")
    return sdist, wheel


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode())


@pytest.mark.slow
def test_the_sdist_and_wheel_build_and_pass_twine_check(tmp_path: Path) -> None:
    sdist, wheel = _built(tmp_path)
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                              str(sdist), str(wheel)], capture_output=True, text=True,
                             timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout

    metadata = _metadata(wheel)
    assert metadata["Name"] == "ouro-lineages"
    assert metadata["Version"] == PYPROJECT["project"]["version"]
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Requires-Python"] == ">=3.11"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().startswith("# ouro\n"), "the README is the description"
    classifiers = metadata.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")], "PEP 639: no both"

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)[:5]
    assert "reconciler/kernel/__main__.py" in names
    assert any(n.startswith("reconciler/kernel/") and n.endswith(".el") for n in names)
    assert any(n.startswith("reconciler/viewer/templates/") for n in names)
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[-1] for m in archive.getmembers()}
    assert {"LICENSE", "README.md", "pyproject.toml", "setup.py"} <= members
