"""A selection decision's evidence and its verification. Read-only but for the record.

Rule: a decision's record (``reconciler.engine.epochs``) carries, beside the decision,
each candidate's generation and, per probe, the SHA-256 of the probe record (its JSON,
keys sorted) its values came from (``evidence``). ``check`` recomputes every recorded
decision of a selected set from the recorded values with the set's rule and seed, and
compares the probe records as they are now with the digests recorded: an edited
decision, a changed rule or a changed probe record is a finding naming the decision.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reconciler.engine.epochs import read_record, selected_sets
from reconciler.kernel.base.config import LineagePaths
from reconciler.plan.selection import Candidate, decide, rng
from reconciler.spec.load import LoadedSpec
from reconciler.spec.selection import SelectionSpec
from reconciler.state import probes as stored

__all__ = ["check", "evidence", "probe_digests"]


def probe_digests(paths: LineagePaths, generation: int) -> dict[str, str]:
    """probe name -> SHA-256 of its record of ``generation`` (keys sorted)."""
    found: dict[str, str] = {}
    for item in stored.records(paths):
        if item.generation == generation:
            text = json.dumps(item.record, sort_keys=True, separators=(",", ":"))
            name = str(item.probe.get("name", item.digest))
            found[name] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return dict(sorted(found.items()))


def evidence(candidates: Sequence[Candidate],
             paths: Mapping[str, LineagePaths]) -> dict[str, Any]:
    """What the record keeps of each candidate: its generation, its values and the
    digests of the probe records they came from."""
    return {one.name: {"generation": one.generation, "values": dict(one.values),
                       "probe_records": probe_digests(paths[one.name], one.generation)}
            for one in sorted(candidates, key=lambda c: c.name)}


_DECIDED = ("kept", "stopped", "born", "values")
_RULE = ("method", "by", "lowest", "seed")


def _check_one(set_name: str, rule: SelectionSpec, record: Mapping[str, Any],
               paths: Mapping[str, LineagePaths], size: int) -> list[str]:
    epoch = int(record.get("epoch", 0))
    where = f"selection of set {set_name}, epoch {epoch}"
    said = [f"{where}: the record's {key} is {record.get(key)!r}, the spec's "
            f"{getattr(rule, key)!r}" for key in _RULE if record.get(key) != getattr(rule, key)]
    shown = record.get("candidates")
    if not isinstance(shown, dict):
        return [*said, f"{where}: the record names no candidates: it cannot be recomputed"]
    candidates = [Candidate(name, int(item["generation"]), item.get("values", {}))
                  for name, item in sorted(shown.items())]
    for name, item in sorted(shown.items()):
        place = paths.get(name)
        now = probe_digests(place, int(item["generation"])) if place else {}
        if now != item.get("probe_records"):
            said.append(f"{where}: {name}'s probe records of gen {item['generation']} are "
                        "not the ones the decision read (changed or removed after it): "
                        "the decision no longer follows from the recorded measurements")
    again = decide(candidates, rule, epoch, rng(rule.seed, epoch), set_name=set_name,
                   size=size).as_json()
    for key in _DECIDED:
        if again[key] != record.get(key):
            said.append(f"{where}: the recorded {key} is not what the rule decides from "
                        f"the recorded values (recomputed: {again[key]!r})")
    return said


def check(specs: Sequence[LoadedSpec], home: Path | None) -> list[str]:
    """Every finding of every selected set's recorded decisions (empty: all follow)."""
    if home is None:
        return []
    said: list[str] = []
    for set_name, rule, members in selected_sets(specs):
        paths = {spec.name: spec.paths() for spec in members}
        size = sum(1 for spec in members if "ouro/epoch" not in spec.labels)
        for epoch in range(1, rule.epochs):
            record = next((found for spec in members if (found := read_record(
                spec.paths(), set_name, epoch)) is not None), None)
            if record is None:
                break
            said += _check_one(set_name, rule, record, paths, size)
    return said
