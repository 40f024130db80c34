"""The summary cache is believed only under its state dir's MAC (issue 23): a forged record
with every digest recomputed, as anyone who can write ``.summaries`` could make it, is
rebuilt from the repositories; a state dir from before the MAC rebuilds its caches once."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

from reconciler.state import summaries
from reconciler.state.cachefile import KEY_FILE
from tests.apply.helpers import run_ouro
from tests.observe.builder import LineageBuilder

CALL = {"http_status": 200, "usage": {"input_tokens": 10, "output_tokens": 4},
        "accounted_usd": "0.01", "reserved_usd": "0.05"}
STATUS, CAUSE, SPEND = (summaries.COLUMNS.index(name)
                        for name in ("status", "death_cause", "spend_usd"))


def _state_with_lineage(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    state = tmp_path / "state"
    builder = LineageBuilder(state, "alpha")
    builder.gen("changed", calls=[CALL])
    builder.gen("no-change", calls=[CALL])
    return state, {**os.environ, "OURO_STATE_DIR": str(state)}


def _forge(path: Path) -> None:
    """What the attacker did: a death and $12.34 of spend in generation 1, every digest
    recomputed (the MAC cannot be: it kept the old one, or none)."""
    header_line, rows_line = path.read_bytes().split(b"\n", 1)
    header: dict[str, Any] = json.loads(header_line)
    rows = json.loads(rows_line)
    rows[0][STATUS], rows[0][CAUSE], rows[0][SPEND] = "died", "signal", "12.34"
    body = json.dumps(rows).encode()
    header.update(rows_sha256=hashlib.sha256(body).hexdigest(), spend_usd="12.35",
                  outcomes={"died": 1, "no-change": 1}, death_kinds={"signal": 1})
    header["sha256"] = summaries._digest(
        {k: v for k, v in header.items() if k not in ("sha256", "mac")})
    path.write_bytes(json.dumps(header).encode() + b"\n" + body)


def test_a_forged_summary_is_not_shown(tmp_path: Path) -> None:
    state, env = _state_with_lineage(tmp_path)
    first = run_ouro("log", "alpha", "--json", env=env)
    assert first.returncode == 0, first.stderr
    [cache] = sorted((state / summaries.CACHE_DIR).glob("*.json"))
    _forge(cache)
    for args in (("log", "alpha", "--json"), ("export", "alpha"), ("log", "alpha"),
                 ("status",)):
        shown = run_ouro(*args, env=env)
        assert shown.returncode == 0, shown.stderr
        assert "12.34" not in shown.stdout and "12.35" not in shown.stdout, (args, shown.stdout)
    exported = list(csv.DictReader(io.StringIO(run_ouro("export", "alpha", env=env).stdout)))
    assert [(row["status"], row["death_cause"], row["spend_usd"]) for row in exported] == [
        ("seed", "", ""), ("changed", "", "0.01"), ("no-change", "", "0.01")]  # row 0 first
    [lineage] = json.loads(run_ouro("log", "alpha", "--json", env=env).stdout)["lineages"]
    assert [row["status"] for row in lineage["rows"]] == ["seed", "changed", "no-change"]
    assert (lineage["spend_usd"], lineage["death_kinds"]) == ("0.02", {})


def test_the_key_is_private_and_kept_outside_the_caches(tmp_path: Path) -> None:
    state, env = _state_with_lineage(tmp_path)
    old = os.umask(0o002)
    try:
        assert run_ouro("log", "alpha", env=env).returncode == 0
    finally:
        os.umask(old)
    key = state / KEY_FILE
    info = key.lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_size == 32
    assert stat.S_IMODE((state / summaries.CACHE_DIR).stat().st_mode) == 0o700
    # a key another user could read vouches for nothing: refused, naming the fix
    key.chmod(0o644)
    refused = run_ouro("log", "alpha", env=env)
    assert refused.returncode == 1 and "remove it" in refused.stderr, refused.stderr
    assert "internal error" not in refused.stderr


def test_a_state_dir_from_before_the_mac_is_rebuilt_once(tmp_path: Path) -> None:
    """Compatibility: a cache written by an ouro without the MAC (a header with digests
    only, no key in the state dir) is rebuilt once, then used."""
    state, env = _state_with_lineage(tmp_path)
    assert run_ouro("log", "alpha", env=env).returncode == 0
    [cache] = sorted((state / summaries.CACHE_DIR).glob("*.json"))
    header_line, rows = cache.read_bytes().split(b"\n", 1)
    header = json.loads(header_line)
    del header["mac"]  # the old format: digests only
    cache.write_bytes(json.dumps(header).encode() + b"\n" + rows)
    (state / KEY_FILE).unlink()
    os.chmod(state, 0o755)  # an older ouro made it under umask 022: readable, not writable
    before = cache.stat().st_ino
    again = run_ouro("log", "alpha", "--json", env=env)
    assert again.returncode == 0, again.stderr
    [lineage] = json.loads(again.stdout)["lineages"]
    assert [row["spend_usd"] for row in lineage["rows"]] == [None, "0.01", "0.01"]  # 0: seed
    rebuilt = cache.stat().st_ino
    assert rebuilt != before and (state / KEY_FILE).exists()  # rebuilt, sealed
    assert "mac" in json.loads(cache.read_bytes().split(b"\n", 1)[0])
    assert run_ouro("log", "alpha", env=env).returncode == 0
    assert cache.stat().st_ino == rebuilt  # once: the sealed cache is used since
