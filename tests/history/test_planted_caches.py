"""A cache or record planted by someone who can write the cache folder but not read the
key (issue 36, item 3): a link to ``/dev/zero``, a 4 GiB sparse file, a FIFO, or the
cache folder itself a link to another folder. ``ouro log`` and ``ouro status`` run under a
1 GiB address-space limit, succeed, and rebuild; the linked folder's target is untouched."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
from pathlib import Path

import pytest

from reconciler.state import summaries
from reconciler.state.audit_record import RECORD_DIR
from tests.apply.helpers import REPO_ROOT, ouro_argv, run_ouro
from tests.verify.test_audit import sound
from tests.verify.test_cli import spec

LIMIT = 1 << 30  # the watchdog: 1 GiB of address space


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(ouro_argv(*args), cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, preexec_fn=_limited)


def _state(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    state = tmp_path / "state"
    sound(state, "alpha")  # 4 generations that verify finds consistent
    env = {**os.environ, "OURO_STATE_DIR": str(state)}
    env["SPEC"] = str(spec(tmp_path, "alpha", state / "alpha"))
    for args in (("log", "alpha"), ("status",), ("verify", env["SPEC"])):
        made = run_ouro(*args, env=env)
        assert made.returncode == 0, made.stderr
    return state, env


def _caches(state: Path) -> list[Path]:
    found = sorted((state / summaries.CACHE_DIR).iterdir()) + sorted(
        (state / RECORD_DIR).iterdir())
    assert len(found) >= 3, found  # the summary, the observed record, the audit record
    return found


def _zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _sparse(path: Path) -> None:
    path.unlink()
    with open(path, "wb") as out:
        out.truncate(4 << 30)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


def _shown(env: dict[str, str]) -> None:
    for args in (("log", "alpha", "--json"), ("status",), ("verify", env["SPEC"])):
        shown = _run(env, *args)
        assert shown.returncode == 0, (args, shown.stderr[-2000:])
        assert "internal error" not in shown.stderr.lower(), shown.stderr
    [lineage] = json.loads(_run(env, "log", "alpha", "--json").stdout)["lineages"]
    assert [row["generation"] for row in lineage["rows"]] == [0, 1, 2, 3, 4]  # 0: the seed


@pytest.mark.parametrize("plant", [_zero, _sparse, _fifo], ids=["dev-zero", "sparse-4GiB", "fifo"])
def test_a_planted_cache_is_absent_and_rebuilt(tmp_path: Path, plant: object) -> None:
    state, env = _state(tmp_path)
    planted = _caches(state)
    for path in planted:
        plant(path)  # type: ignore[operator]
    _shown(env)
    rebuilt = [path for path in (state / summaries.CACHE_DIR).iterdir() if path.is_file()
               and not path.is_symlink() and path.stat().st_size < 1 << 20]
    assert rebuilt, "the summary cache is rebuilt as a regular file"


def _tree(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("name", [summaries.CACHE_DIR, RECORD_DIR])
def test_a_linked_cache_folder_is_never_written_through(tmp_path: Path, name: str) -> None:
    state, env = _state(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (state / name).rename(elsewhere)  # its caches, exactly as ouro wrote them
    os.chmod(elsewhere, 0o700)
    (elsewhere / "someone-elses.txt").write_text("keep me\n")
    before = _tree(elsewhere)
    (state / name).symlink_to(elsewhere, target_is_directory=True)
    for path in elsewhere.iterdir():  # made stale: ouro would rewrite each at its name
        if path.suffix == ".json" or name == RECORD_DIR:
            path.write_bytes(path.read_bytes()[:-1] + b" ")
    before = _tree(elsewhere)
    _shown(env)
    assert _tree(elsewhere) == before, "nothing is written into the link's target"
    assert not (state / name).is_symlink(), "the link is replaced by ouro's own folder"
