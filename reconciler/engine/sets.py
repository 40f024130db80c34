"""The members a LineageSet no longer has: what exists in the state dir, observed. Read-only.

Rule: a lineage is an orphan of set S when it lives at the state dir's default places
(``NAME``, ``NAME.git``, ``NAME.observations``), its name is one S's members are given
(``reconciler.spec.sets.member_pattern``) and no spec of the run names it. It is shown,
never changed: history is never removed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from reconciler.plan.planner import Orphan, find_orphans
from reconciler.spec.load import LoadedSpec, default_places
from reconciler.spec.load import state_dir as resolve_state_dir

__all__ = ["set_orphans"]


def set_orphans(loaded: Sequence[LoadedSpec], chosen: Sequence[LoadedSpec],
                state_dir: Path | None) -> list[Orphan]:
    """The orphans of the sets of ``chosen`` (``loaded``: every spec of the run)."""
    set_names = [spec.set_name for spec in chosen if spec.set_name is not None]
    if not set_names:
        return []
    try:
        folder = resolve_state_dir(state_dir)
        names = os.listdir(folder)
    except (OSError, RuntimeError, KeyError, ValueError):
        return []  # no state dir to look in: no orphans to show
    known = {spec.name for spec in loaded}
    existing: dict[str, str] = {}
    for name in names:
        if name in known or name.startswith(".") or name.endswith((".git", ".observations")):
            continue
        places = default_places(folder / name, name)
        if places.git_dir.is_dir() and places.observations.is_dir():
            existing[name] = str(places.worktree)
    return find_orphans(set_names, known, existing)
