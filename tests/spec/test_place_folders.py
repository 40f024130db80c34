"""The place checks of a fleet, each folder asked once (``places.Folders``): the same
answers as resolving and checking every place in full, and the same refusals at load."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.spec import places
from reconciler.spec.load import load_specs
from tests.observe.builder import LineageBuilder


def _folders(named: dict[str, object] | None = None,
             forbidden: tuple[Path, ...] = places.SYSTEM_FOLDERS) -> places.Folders:
    return places.Folders(forbidden, named or {}, {})


def test_realpath_is_os_realpath(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "dir").mkdir()
    (tmp_path / "real" / "to-etc").symlink_to("/etc")
    (tmp_path / "real" / "loop").symlink_to(tmp_path / "real" / "loop")
    (tmp_path / "real" / "up").symlink_to("..")
    folders = _folders()
    cases = [tmp_path / "real" / name for name in ("dir", "to-etc", "loop", "up", "absent")]
    cases += [tmp_path / "linked" / name for name in ("dir", "to-etc", "absent")]
    for place in [str(p) for p in cases] + [f"{tmp_path}/real/../linked/dir", "/", "/tmp"]:
        for _ in range(2):  # the second time from what the first resolved
            assert folders.realpath(place) == os.path.realpath(place), place


def test_a_place_is_clear_only_when_no_check_could_refuse_it(tmp_path: Path) -> None:
    home = os.path.expanduser("~")
    worktree = tmp_path / "lineages" / "alpha"
    LineageBuilder(tmp_path / "lineages").gen()
    named = {str(tmp_path / "run" / "beta"): object()}
    folders = _folders(named, (*places.SYSTEM_FOLDERS, Path("/proc"), tmp_path / "ouro"))
    assert folders.clear(str(tmp_path / "fleet" / "gamma"))
    assert folders.clear(str(tmp_path / "run" / "gamma"))  # beside a place: fine
    for refused in ("/", "/srv", home, "/etc/x", "/usr/lib/x", "/proc/1", "/var/lib/x",
                    str(tmp_path / "ouro"), str(tmp_path / "ouro" / "x"),
                    str(tmp_path / "run" / "beta" / "x"), f"{worktree}/inner",
                    f"{worktree}.git/inner", f"{tmp_path}/a/../b", f"/{tmp_path}/c"):
        assert not folders.clear(refused), refused


def _member(folder: Path, name: str, path: Path) -> None:
    (folder / f"{name}.yaml").write_text(
        f"apiVersion: ouro/v1\nkind: Lineage\nmetadata:\n  name: {name}\nspec:\n"
        f"  generations: 1\n  model:\n    provider: echo\n    name: echo\n"
        f"  storage:\n    path: {json.dumps(str(path))}\n", encoding="utf-8")


def test_links_among_many_places_are_refused_each(tmp_path: Path) -> None:
    """Forty places in one folder, three of them links (to a system folder, into another
    lineage, into a place of the run): those three are refused, naming what they reach."""
    specs, fleet = tmp_path / "specs", tmp_path / "fleet"
    specs.mkdir()
    fleet.mkdir()
    other = LineageBuilder(tmp_path / "elsewhere", "other")
    other.gen()
    for index in range(40):
        _member(specs, f"l{index:02d}", fleet / f"l{index:02d}")
    (fleet / "l07").symlink_to("/etc/ouro-test-absent")
    (fleet / "l13").symlink_to(other.paths.worktree / "inner")
    (fleet / "l21").symlink_to(fleet / "l22" / "inner")
    with pytest.raises(SpecError) as caught:
        load_specs([specs], state_dir=tmp_path / "state")
    said = str(caught.value)
    assert "is under /etc, a system location" in said
    assert f"is inside {other.paths.worktree}, a lineage's worktree" in said
    assert "lineage 'l22''s worktree" in said
    assert len(caught.value.problems) == 3, said
    (fleet / "l07").unlink()
    (fleet / "l13").unlink()
    (fleet / "l21").unlink()
    assert len(load_specs([specs], state_dir=tmp_path / "state")) == 40


def test_a_linked_parent_folder_refuses_every_place_in_it(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (tmp_path / "fleet").symlink_to("/usr/lib")
    for index in range(5):
        _member(specs, f"l{index}", tmp_path / "fleet" / f"l{index}")
    with pytest.raises(SpecError) as caught:
        load_specs([specs], state_dir=tmp_path / "state")
    assert len(caught.value.problems) == 15  # three places each
    assert all("a system location" in p.message for p in caught.value.problems)
