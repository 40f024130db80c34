"""Which lineages a history command looks at: by name, through specs or the state dir.

Rule: read-only. A name is found in the specs given (``--specs``), else as
``<state dir>/<name>`` with the default places and the branches it records
(``reconciler.state.branches``). A folder of
lineages without specs is the state dir's every ``NAME`` that has ``NAME.git``
and ``NAME.observations`` beside it.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.errors import StateError
from reconciler.kernel.base.config import LineagePaths
from reconciler.ownfiles import check_private
from reconciler.spec.load import LoadedSpec, default_places, load_specs
from reconciler.spec.models import ModelSpec
from reconciler.state.branches import resolve, spec_paths
from reconciler.statedir import state_dir

__all__ = ["Lineage", "audit_record_dir", "find_lineages", "fleet", "summary_cache_dir"]


@dataclass(frozen=True)
class Lineage:
    name: str
    paths: LineagePaths
    desired: int | None = None  # the generations its spec asks for (None: no spec)
    model: ModelSpec | None = None  # its spec's model section (None: no spec)
    spec: LoadedSpec | None = None  # its spec, as loaded (None: no spec)


def _checked(folder: Path) -> Path:
    """A cache folder of the state dir, both refused if others can write them (their
    caches are sealed with a key that such a party could have replaced)."""
    check_private(folder.parent, "the state dir")
    check_private(folder, "the cache folder", own=True)
    return folder


def summary_cache_dir(explicit: Path | None = None) -> Path:
    """Where derived summaries are cached: ``<state dir>/.summaries``."""
    from reconciler.state.cachefile import CACHE_DIR

    return _checked(state_dir(explicit) / CACHE_DIR)


def audit_record_dir(explicit: Path | None = None) -> Path:
    """Where the audits' clean verdicts are recorded: ``<state dir>/.audits``."""
    from reconciler.state.audit_record import RECORD_DIR

    return _checked(state_dir(explicit) / RECORD_DIR)


def _in_state_dir(folder: Path) -> list[Lineage]:
    found: list[Lineage] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    for name in names:
        if name.startswith(".") or name.endswith((".git", ".observations", ".ouro-lock")):
            continue
        places = default_places(folder / name, name)
        if places.git_dir.is_dir() and places.observations.is_dir():
            found.append(Lineage(name, resolve(places, declared_branch=None,
                                               declared_observation_branch=None)))
    return found


def fleet(specs: Sequence[Path], explicit_state_dir: Path | None = None) -> list[Lineage]:
    """The specs' lineages (in spec order), or every lineage in the state dir."""
    if specs:
        return [Lineage(spec.name, spec_paths(spec), spec.spec.spec.generations,
                        spec.spec.spec.model, spec)
                for spec in load_specs(specs, state_dir=explicit_state_dir)]
    return _in_state_dir(state_dir(explicit_state_dir))


def find_lineages(names: Sequence[str], specs: Sequence[Path],
                  explicit_state_dir: Path | None = None) -> list[Lineage]:
    """Each named lineage; a name that is not there is an error naming the remedy."""
    known = {item.name: item for item in fleet(specs, explicit_state_dir)}
    found: list[Lineage] = []
    where = (", ".join(str(path) for path in specs) if specs
             else str(state_dir(explicit_state_dir)))
    for name in names:
        if name in known:
            found.append(known[name])
            continue
        close = difflib.get_close_matches(name, list(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        remedy = ("" if specs else
                  "; for lineages stored elsewhere, name their specs with --specs PATH")
        raise StateError(f"ouro: no lineage {name!r} in {where}{hint}{remedy}")
    return found
