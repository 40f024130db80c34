"""The files apply writes beside a lineage and in the state dir (issue 23): no write
follows a link or lands in a FIFO, folders others can write are refused, ouro's own
folders are 0700 whatever the umask, and a state dir from before all this keeps working."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from reconciler.state.cachefile import KEY_FILE
from tests.apply.helpers import run_ouro, write_spec


def _apply(spec: Path, env: dict[str, str]) -> tuple[int, str]:
    done = run_ouro("apply", "--yes", str(spec), env=env)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("planted", ["lock", "holder", "fifo"])
def test_what_is_planted_beside_a_git_dir_is_refused(tmp_path: Path, env: dict[str, str],
                                                     specs: Path, planted: str) -> None:
    """What the attacker did: links beside the git dir, named as the lock, its holder
    record and the old temporary record, pointing at a file that does not exist (the
    open would create it) and one that does (the record would overwrite it)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    created, precious = tmp_path / "created-by-ouro", tmp_path / "precious"
    precious.write_text("precious\n")
    lock, holder = state / "alpha.git.ouro-lock", state / "alpha.git.ouro-lock.json"
    (state / "alpha.git.ouro-lock.tmp").symlink_to(precious)
    if planted == "lock":
        lock.symlink_to(created)
    elif planted == "holder":
        holder.symlink_to(precious)
    else:
        os.mkfifo(lock)
    code, out = _apply(write_spec(specs, "alpha", 1), env)
    assert code == 1, out
    what = "FIFO" if planted == "fifo" else "symbolic link"
    assert what in out and str(lock if planted != "holder" else holder) in out, out
    assert "internal error" not in out
    assert not created.exists() and precious.read_text() == "precious\n"
    assert not (state / "alpha.git").exists()  # refused before anything was created


def test_a_state_dir_others_can_write_is_refused(tmp_path: Path, env: dict[str, str],
                                                 specs: Path) -> None:
    """A lineage's state dir made group-writable (as a shared group folder under umask
    002 is): every command that would trust what is in it refuses, naming the mode and
    the fix; a fresh one is refused before anything is created."""
    state = tmp_path / "state"
    spec = write_spec(specs, "alpha", 1)
    code, out = _apply(spec, env)
    assert code == 0, out
    os.chmod(state, 0o775)
    for args in (("apply", "--yes", str(write_spec(specs, "alpha", 2))), ("status",),
                 ("log", "alpha"), ("export", "alpha"), ("verify", str(specs))):
        done = run_ouro(*args, env=env)
        out = done.stdout + done.stderr
        assert done.returncode == 1, (args, out)
        assert "group-writable (mode 0775)" in out and f"chmod go-w {state}" in out, out
        assert "internal error" not in out
    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o777)
    os.chmod(fresh, 0o777)
    done = run_ouro("apply", "--yes", str(spec), env={**env, "OURO_STATE_DIR": str(fresh)})
    assert done.returncode == 1 and "group- and world-writable (mode 0777)" in done.stderr
    assert os.listdir(fresh) == []


def test_ouro_makes_its_folders_private_whatever_the_umask(tmp_path: Path,
                                                           env: dict[str, str],
                                                           specs: Path) -> None:
    state = tmp_path / "state"
    old = os.umask(0o002)
    try:
        code, out = _apply(write_spec(specs, "alpha", 1), env)
        assert code == 0, out
        assert run_ouro("log", "alpha", env=env).returncode == 0
    finally:
        os.umask(old)
    for folder in (state, state / ".summaries", state / ".audits", state / ".kernels"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE((state / KEY_FILE).stat().st_mode) == 0o600


def _age(state: Path) -> None:
    """Make the state dir look as an ouro before issue 23 left it: caches without a MAC,
    no key, the folders and files its umask 022 made."""
    for cache in [*state.glob(".summaries/*.json"), *state.glob(".audits/*.audit")]:
        header_line, rest = cache.read_bytes().split(b"\n", 1)
        header = json.loads(header_line)
        del header["mac"]
        cache.write_bytes(json.dumps(header, separators=(",", ":")).encode() + b"\n" + rest)
    (state / KEY_FILE).unlink()
    for folder in (state, state / ".summaries", state / ".audits"):
        os.chmod(folder, 0o755)
    for name in ("events.jsonl", "alpha.git.ouro-lock"):
        os.chmod(state / name, 0o644)


def test_a_lineage_from_before_keeps_working(tmp_path: Path, env: dict[str, str],
                                             specs: Path) -> None:
    """Compatibility: its caches are rebuilt once (sealed since), its lock and 0755
    folders are accepted (readable by others is not writable by them)."""
    state = tmp_path / "state"
    code, out = _apply(write_spec(specs, "alpha", 1), env)
    assert code == 0, out
    assert run_ouro("log", "alpha", env=env).returncode == 0
    _age(state)
    code, out = _apply(write_spec(specs, "alpha", 2), env)
    assert code == 0, out
    assert "consistent" in out, out
    log = json.loads(run_ouro("log", "alpha", "--json", env=env).stdout)
    assert log["lineages"][0]["generations"] == 2
    assert (state / KEY_FILE).exists()
    for cache in [*state.glob(".summaries/*.json"), *state.glob(".audits/*.audit")]:
        assert "mac" in json.loads(cache.read_bytes().split(b"\n", 1)[0]), cache
    verified = run_ouro("verify", str(specs), env=env)
    assert verified.returncode == 0 and "alpha: consistent" in verified.stdout, verified.stdout
