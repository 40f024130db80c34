"""Provider ``recorded``: another lineage's recorded replies, served by the kernel's replay.

Rule: no kernel change. A spec's ``model: {provider: recorded, lineage: SOURCE}`` is, to
the kernel, ``provider: replay`` of the folder ``<state dir>/.recorded/NAME``
(``LoadedSpec.recorded_dir``), which ouro fills here, as a derived cache, from SOURCE's
record (``state.recorded``): every reply SOURCE received answered 200, in order, from its
generation 1, or for a fork (``spec.from``) from the generation after the fork point.
The folder is written again only when SOURCE's heads moved (its ``.source.json``, hidden
from the replay provider, says what it holds), and whole: a new folder swapped in. SOURCE
is a spec of the same run, else ``<state dir>/SOURCE``; it is read, never written. When
the replies run out, the lineage stops before the next generation (``replay-exhausted``,
as any replay folder). Every generation's observation records which replies it was
answered with (``ran_with.recorded``, ``SCHEMA``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reconciler.errors import OuroError
from reconciler.kernel.base.config import LineagePaths
from reconciler.ownfiles import private_folder
from reconciler.spec.load import LoadedSpec
from reconciler.state.observe import observe
from reconciler.state.recorded import read_history

__all__ = ["SCHEMA", "SOURCE_FILE", "fill", "remaining_note", "source_record"]

SCHEMA = "ouro-recorded/v1"
SOURCE_FILE = ".source.json"  # hidden: the replay provider reads no name starting with "."


def _first(spec: LoadedSpec) -> int:
    """The source's first generation whose replies answer this lineage."""
    return spec.fork.generation + 1 if spec.fork is not None else 1


def source_record(spec: LoadedSpec) -> dict[str, Any] | None:
    """What ``spec``'s folder holds (its ``.source.json``), None when it holds nothing."""
    if spec.recorded_dir is None:
        return None
    try:
        found = json.loads((spec.recorded_dir / SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and found.get("schema") == SCHEMA else None


def _replies(name: str, paths: LineagePaths | None, first: int
             ) -> tuple[dict[str, Any], list[str]]:
    record: dict[str, Any] = {"schema": SCHEMA, "lineage": name, "from_generation": first,
                              "root": None, "lineage_head": None, "observation_head": None,
                              "through_generation": 0, "replies": 0}
    if paths is None:
        return record, []
    seen = observe(paths)
    if not seen.is_lineage or seen.problems:
        return record, []
    history = read_history(paths, seen.generations)
    replies = [call.response or "" for generation in history.generations
               if generation.number >= first for call in generation.calls if call.answered]
    record.update(root=history.root, lineage_head=history.lineage_head,
                  observation_head=history.observation_head,
                  through_generation=seen.generations, replies=len(replies))
    return record, replies


def _swap(folder: Path, record: dict[str, Any], replies: list[str]) -> None:
    """``folder`` made to hold ``replies`` and their record, whole: built beside, swapped in."""
    from reconciler.engine.reproduce.scratch import write_replies

    private_folder(folder.parent, "the recorded replies' folder")
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}.", dir=folder.parent) as work:
        fresh = write_replies(Path(work) / "new", replies)
        (fresh / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if folder.exists():
            os.replace(folder, Path(work) / "old")
        os.replace(fresh, folder)
        shutil.rmtree(Path(work) / "old", ignore_errors=True)


def fill(specs: Sequence[LoadedSpec], where: Any) -> None:
    """Fill the folder of every ``recorded`` spec from its source's record, where the
    source's heads moved since. ``where(name)``: the source's places, or None."""
    for spec in specs:
        model = spec.spec.spec.model
        if spec.recorded_dir is None or model.lineage is None:
            continue
        source = where(model.lineage)
        try:
            record, replies = _replies(model.lineage, source, _first(spec))
        except OuroError as error:
            raise OuroError(f"ouro: lineage {spec.name}: the recorded replies of "
                            f"{model.lineage} do not read ({error})") from error
        kept = source_record(spec)
        if kept is not None and all(kept.get(key) == record[key] for key in record):
            continue
        try:
            _swap(spec.recorded_dir, record, replies)
        except OSError as error:
            raise OuroError(f"ouro: lineage {spec.name}: cannot write its recorded replies "
                            f"in {spec.recorded_dir} ({error.strerror})") from error


def remaining_note(spec: LoadedSpec, last_observation: dict[str, Any] | None) -> str | None:
    """Plan's line: how many of the source's replies are left for this lineage."""
    record = source_record(spec)
    if record is None:
        return None
    used = (last_observation or {}).get("replay_cursor")
    used = used if isinstance(used, int) else 0
    total = int(record.get("replies") or 0)
    return (f"recorded replies of {record.get('lineage')} (from its gen "
            f"{record.get('from_generation')}): {max(0, total - used)} of {total} remain")
