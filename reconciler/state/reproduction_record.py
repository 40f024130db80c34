"""The last reproduction's verdict of each lineage, kept for the viewer and `status`-like
readers: a sealed cache, as the audit's records are.

Rule: a record lives in ``<state dir>/.reproductions/`` (``RECORD_DIR``), one file per
lineage named ``<name>-<key>.json`` (``key``: ``cachefile.cache_key``, the lineage's places
and branches), outside the lineage's three places. It says what one reproduction found
(the verdict's JSON, as `ouro reproduce --json` prints it), when it was kept (``ran_at``,
UTC) and the two heads it read; it
is believed only when it carries the state dir's MAC (``state.cachefile``) and its schema
and key check, and ``load`` says whether the lineage has grown since (``current``: both
heads are still where the reproduction read them). Deleting it loses nothing: the
repositories are the state, and a reproduction can be run again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.kernel.base.config import LineagePaths
from reconciler.state.cachefile import cache_key, cache_seal, canonical, write_cache
from reconciler.state.repos import Lineage

__all__ = ["RECORD_DIR", "SCHEMA", "Kept", "load", "record_file", "save"]

RECORD_DIR = ".reproductions"
SCHEMA = "ouro-reproduction-record/v1"
_MAX_BYTES = 16 << 20


@dataclass(frozen=True)
class Kept:
    """A kept verdict, and whether the lineage is still as the reproduction read it."""

    verdict: dict[str, Any]
    lineage_head: str
    observation_head: str
    current: bool
    ran_at: str | None = None  # when it was kept (ISO 8601, UTC); None: not recorded


def record_file(folder: Path, name: str, paths: LineagePaths) -> Path:
    return folder / f"{name}-{cache_key(paths)}.json"


def save(folder: Path, name: str, paths: LineagePaths, verdict: dict[str, Any],
         heads: tuple[str, str]) -> bool:
    """Keep ``verdict`` (False when it cannot be written: a cache, never a failure)."""
    seal = cache_seal(folder, create=True) if _private(folder) else None
    if seal is None:
        return False
    header = {"schema": SCHEMA, "key": cache_key(paths), "lineage_head": heads[0],
              "observation_head": heads[1], "verdict": verdict,
              "ran_at": datetime.now(UTC).isoformat(timespec="seconds")}
    return write_cache(record_file(folder, name, paths), canonical(seal.sealed(header)))


def _private(folder: Path) -> bool:
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return False
    return True


def load(folder: Path, name: str, paths: LineagePaths) -> Kept | None:
    """The kept verdict of ``name``'s lineage at ``paths``; None when there is none that
    this state dir sealed for these places."""
    target = record_file(folder, name, paths)
    try:
        if not target.is_file() or target.stat().st_size > _MAX_BYTES:
            return None
        seal = cache_seal(folder, create=False)
        header = json.loads(target.read_bytes())
    except (OSError, ValueError):
        return None
    if (seal is None or not isinstance(header, dict) or not seal.opens(header)
            or header.get("schema") != SCHEMA or header.get("key") != cache_key(paths)
            or not isinstance(header.get("verdict"), dict)):
        return None
    heads = (str(header.get("lineage_head")), str(header.get("observation_head")))
    lineage = Lineage(paths)
    now = (lineage.refs("lineage", (paths.branch,))[1][0],
           lineage.refs("observations", (paths.observation_branch,))[1][0])
    ran_at = header.get("ran_at")
    return Kept(header["verdict"], heads[0], heads[1], current=now == heads,
                ran_at=ran_at if isinstance(ran_at, str) else None)


def record_dir(state: Path) -> Path:
    """``<state>/.reproductions``."""
    return Path(os.fspath(state)) / RECORD_DIR
