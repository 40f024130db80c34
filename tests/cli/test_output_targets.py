"""``-o`` targets (issue 23): what exists and is not a regular file is refused, never
replaced; the temporary file is made beside the target with O_EXCL and never left.

The device is a /dev/full of the test's own (``mknod`` with its numbers): the host's
``/dev/full`` is the issue's example, but a test must not risk replacing it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.apply.helpers import run_ouro, write_spec
from tests.host import require
from tests.observe.builder import LineageBuilder

KINDS = ["device", "fifo", "folder", "link-to-device"]


def _target(tmp_path: Path, kind: str) -> tuple[Path, int]:
    """The planted target and the file type it must still be afterwards."""
    place = tmp_path / "out"
    place.mkdir()
    if kind in ("device", "link-to-device"):
        require(os.geteuid() == 0, "mknod of a character device needs root")
        device = place / "full"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # /dev/full's numbers
        if kind == "device":
            return device, stat.S_IFCHR
        link = place / "plan.json"
        link.symlink_to(device)
        return link, stat.S_IFCHR
    target = place / "plan.json"
    if kind == "fifo":
        os.mkfifo(target)
        return target, stat.S_IFIFO
    target.mkdir()
    return target, stat.S_IFDIR


def _unchanged(target: Path, kind: int) -> None:
    assert stat.S_IFMT(os.stat(target).st_mode) == kind
    assert [p.name for p in target.parent.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("kind", KINDS)
def test_plan_o_refuses_what_is_not_a_regular_file(tmp_path: Path, env: dict[str, str],
                                                   specs: Path, kind: str) -> None:
    write_spec(specs, "alpha", 1)
    target, file_type = _target(tmp_path, kind)
    done = run_ouro("plan", str(specs), "-o", str(target), env=env, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not a regular file" in done.stderr and "never replaces it" in done.stderr
    assert "internal error" not in done.stderr
    _unchanged(target, file_type)


@pytest.mark.parametrize("kind", KINDS)
def test_export_o_refuses_what_is_not_a_regular_file(tmp_path: Path, env: dict[str, str],
                                                     kind: str) -> None:
    LineageBuilder(tmp_path / "state", "alpha").gen("no-change")
    target, file_type = _target(tmp_path, kind)
    done = run_ouro("export", "alpha", "-o", str(target), env=env, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not a regular file" in done.stderr and "internal error" not in done.stderr
    _unchanged(target, file_type)


def test_a_regular_target_is_replaced_whole(tmp_path: Path, env: dict[str, str],
                                            specs: Path) -> None:
    write_spec(specs, "alpha", 1)
    target = tmp_path / "plan.json"
    target.write_text("an older plan\n")
    done = run_ouro("plan", str(specs), "-o", str(target), env=env)
    assert done.returncode == 2, done.stderr  # 2: the plan has changes
    assert target.read_text().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "specs"]
