"""Spec paths are confined: what a spec author (whose pull request got merged) tried.

A replay folder outside the spec's tree (a 0600 credentials file became organism.el),
a storage place on the host Python's path (organism code ran in an unrelated python3),
in a system location, in the state dir's own folders, inside another lineage; and a
spec whose name is not the one the lineage at its place records. Each is refused with
FILE:LINE:COL and what to do, before anything is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest

from reconciler.engine.executors.slurm import JOBS_DIR
from reconciler.kernel.broker.providers import MAX_RESPONSE_BYTES
from reconciler.spec import places
from reconciler.state import instrument
from reconciler.state.kernel_store import STORE_ENV
from tests.inprocess import ouro
from tests.observe.builder import LineageBuilder, lineage_paths

SECRET = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
OURO = Path(sys.executable).with_name("ouro")


def _spec(name: str, *, replay: str | None = None, storage: str | None = None) -> str:
    model = (f"    provider: replay\n    replay: {json.dumps(replay)}\n" if replay is not None
             else "    provider: echo\n")
    text = (f"apiVersion: ouro/v1\nkind: Lineage\nmetadata:\n  name: {name}\nspec:\n"
            f"  generations: 1\n  model:\n{model}")
    if storage is not None:
        text += f"  storage:\n    path: {json.dumps(storage)}\n"
    return text


def _write(folder: Path, text: str, name: str = "fleet.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")
    return folder / name


def _credentials(root: Path) -> Path:
    folder = root / "home" / ".aws"
    folder.mkdir(parents=True)
    (folder / "credentials").write_text(SECRET, encoding="utf-8")
    (folder / "credentials").chmod(0o600)
    return folder


def test_the_reply_bound_is_the_brokers_and_the_names_are_ouros() -> None:
    assert places.MAX_REPLY_BYTES == MAX_RESPONSE_BYTES
    assert (places.KERNEL_STORE_ENV, places.JOBS_DIR) == (STORE_ENV, JOBS_DIR)


@pytest.mark.parametrize("how", ["absolute", "dotdot", "link"])
def test_a_replay_folder_outside_the_specs_tree_is_refused_and_nothing_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    secret = _credentials(tmp_path)
    specs = tmp_path / "repo" / "specs"
    specs.mkdir(parents=True)
    replay = {"absolute": str(secret), "dotdot": "../../home/.aws", "link": "replies"}[how]
    if how == "link":  # a link committed beside the spec, to the secret's folder
        (specs / "replies").symlink_to(secret)
    spec = _write(specs, _spec("thief", replay=replay))
    state = tmp_path / "state"
    code, out, err = ouro(monkeypatch, capsys, "apply", "--yes", "--state-dir", state, spec)
    assert code == 1, out + err
    assert f"{spec}:9:13: spec.model.replay: the replay folder" in err
    if how == "link":  # refused by the link's name, never followed
        assert f"{specs / 'replies'} is a symbolic link; ouro reads no spec through a link: " \
            "replace it with the folder" in err
    else:
        assert "is outside the spec file's folder" in err and "beside the spec" in err
    assert not state.exists() or not any(state.iterdir())  # nothing born, nothing committed
    assert "Traceback" not in err


@pytest.mark.parametrize("reply", ["link", "fifo", "huge"])
def test_each_reply_is_a_regular_file_of_bounded_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    reply: str,
) -> None:
    secret = _credentials(tmp_path)
    specs = tmp_path / "specs"
    replies = specs / "replies"
    replies.mkdir(parents=True)
    (replies / "0001").write_text("(message \"fine\")\n", encoding="utf-8")
    if reply == "link":
        (replies / "0002").symlink_to(secret / "credentials")
    elif reply == "fifo":
        os.mkfifo(replies / "0002")
    else:
        with open(replies / "0002", "wb") as handle:  # sparse: no disk used
            handle.truncate(places.MAX_REPLY_BYTES + 1)
    spec = _write(specs, _spec("thief", replay="replies"))
    code, _, err = ouro(monkeypatch, capsys, "validate", spec)
    assert code == 1
    expected = {"link": "is a link", "fifo": "is not a regular file",
                "huge": f"a reply has at most {places.MAX_REPLY_BYTES}"}[reply]
    assert f"{spec}:9:13: spec.model.replay: the reply" in err and expected in err, err


def test_replies_beside_the_spec_still_load(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    (specs / "replies" / "scribe").mkdir(parents=True)
    (specs / "replies" / "scribe" / "0001").write_text("()\n", encoding="utf-8")
    (specs / "replies" / "scribe" / ".notes").symlink_to("/etc/hostname")  # hidden: skipped
    spec = _write(specs, _spec("fine", replay="replies/scribe"))
    result = subprocess.run([str(OURO), "validate", str(spec)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_a_place_on_the_host_pythons_path_is_refused(tmp_path: Path) -> None:
    # A folder a root python3 imports from (PYTHONPATH here; a user site folder below):
    # a worktree there would let the organism's sitecustomize.py run in any python3.
    pythonpath = tmp_path / "pp"
    pythonpath.mkdir()
    spec = _write(tmp_path / "specs", _spec("snake", storage=str(pythonpath / "snake")))
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "OURO_STATE_DIR": str(tmp_path / "s")}
    result = subprocess.run([str(OURO), "apply", "--yes", str(spec)], capture_output=True,
                            text=True, timeout=120, check=False, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (f"{spec}:10:11: spec.storage.path: {pythonpath / 'snake'} is inside {pythonpath}, "
            "on the host Python's path") in result.stderr
    assert not (pythonpath / "snake").exists()


def test_the_system_python3s_user_site_is_refused_before_it_exists(tmp_path: Path) -> None:
    python3 = "/usr/bin/python3"
    found = subprocess.run([python3, "-c", "import site; print(site.getusersitepackages())"],
                           capture_output=True, text=True, timeout=60, check=True)
    user_site = Path(found.stdout.strip())
    assert user_site in places.python_path_folders()
    spec = _write(tmp_path / "specs", _spec("snake", storage=str(user_site)))
    result = subprocess.run([str(OURO), "validate", str(spec)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 1 and "on the host Python's path" in result.stderr


@pytest.mark.parametrize("place", ["/", "/srv", "/usr/lib/ouro-x", "/etc/ouro/x",
                                   "/var/lib/ouro/x", "/boot/x", "~"])
def test_a_system_location_is_refused(tmp_path: Path, place: str) -> None:
    spec = _write(tmp_path / "specs", _spec("sys", storage=place))
    result = subprocess.run([str(OURO), "validate", str(spec)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 1
    assert f"{spec}:10:11: spec.storage.path: " in result.stderr
    assert ("a system location" in result.stderr or "top-level folder" in result.stderr
            or "the home folder itself" in result.stderr), result.stderr


@pytest.mark.parametrize("folder", [".summaries", ".audits", ".kernels", JOBS_DIR, "store"])
def test_the_state_dirs_own_folders_and_the_kernel_store_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    folder: str,
) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "store"))
    base = tmp_path if folder == "store" else state
    spec = _write(tmp_path / "specs", _spec("cache", storage=str(base / folder / "cache")))
    code, _, err = ouro(monkeypatch, capsys, "plan", "--state-dir", state, spec)
    assert code == 1
    assert f"{spec}:10:11: spec.storage.path: {base / folder / 'cache'} is inside " in err, err


def test_a_lineage_inside_another_lineages_worktree_is_refused_and_it_stays_in_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    outer = LineageBuilder(tmp_path / "lineages", "outer", identity=instrument.current())
    outer.gen()
    inner_at = outer.paths.worktree / "inner"
    specs = tmp_path / "specs"
    _write(specs, _spec("inner", storage=str(inner_at)), "inner.yaml")
    code, _, err = ouro(monkeypatch, capsys, "apply", "--yes", specs)
    assert code == 1
    assert (f"{specs / 'inner.yaml'}:10:11: spec.storage.path: {inner_at} is inside "
            f"{outer.paths.worktree}, a lineage's worktree") in err, err
    assert not inner_at.exists()
    # and inside its git dir or its observations, written as another path's child
    for place, where, what in (
            (outer.paths.git_dir / "refs" / "x", outer.paths.git_dir, "a git dir"),
            (outer.paths.observations / "x", outer.paths.observations,
             "a lineage's observations")):
        _write(specs, _spec("inner", storage=str(place)), "inner.yaml")
        code, _, err = ouro(monkeypatch, capsys, "validate", specs)
        assert code == 1 and f"is inside {where}, {what}" in err, err


def test_two_specs_of_one_run_cannot_nest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    specs = tmp_path / "specs"
    _write(specs, _spec("outer", storage=str(tmp_path / "l" / "outer")) + "---\n"
           + _spec("inner", storage=str(tmp_path / "l" / "outer" / "deep" / "inner")))
    code, _, err = ouro(monkeypatch, capsys, "plan", specs)
    assert code == 1
    assert (f"is inside {tmp_path / 'l' / 'outer'}, lineage 'outer''s worktree") in err, err


def test_a_spec_of_another_name_at_a_lineages_place_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # One run created lineage 'alpha' at a place; another run's spec 'beta' names that place.
    alpha = LineageBuilder(tmp_path, "alpha", identity=instrument.current())
    alpha.gen()
    assert pygit2.Repository(str(alpha.paths.git_dir)).head.shorthand == "lineage-alpha"
    specs = tmp_path / "specs"
    _write(specs, _spec("alpha", storage=str(alpha.paths.worktree)).replace(
        "generations: 1", "generations: 2") + "  # same place\n", "alpha.yaml")
    code, out, _ = ouro(monkeypatch, capsys, "plan", "--json", specs / "alpha.yaml")
    assert json.loads(out)["lineages"][0]["action"] == "extend"
    _write(specs, _spec("beta", storage=str(alpha.paths.worktree)).replace(
        "generations: 1", "generations: 2"), "beta.yaml")
    code, out, _ = ouro(monkeypatch, capsys, "plan", "--json", specs / "beta.yaml")
    (item,) = json.loads(out)["lineages"]
    assert code == 1 and (item["action"], item["reason"]) == ("refuse", "branch-mismatch")
    assert "it is lineage 'alpha', and this spec is named 'beta'" in item["message"]
    code, _, _ = ouro(monkeypatch, capsys, "apply", "--yes", specs / "beta.yaml")
    assert code == 1
    before = lineage_paths(tmp_path, "alpha")
    assert pygit2.Repository(str(before.git_dir)).head.target == alpha.head
