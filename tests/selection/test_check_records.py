"""ouro verify's selection check (issue 39, item 4) on hand-made records: a record as
decided passes; an edited decision, an edited value or another rule is named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pygit2

from reconciler.engine.probes.records import write_record
from reconciler.engine.selection_records import _check_one, probe_digests
from reconciler.plan.selection import Candidate, decide, rng
from reconciler.spec.probes import ProbeFiles
from reconciler.spec.selection import SelectionSpec
from reconciler.state import probes as stored
from tests.observe.builder import LineageBuilder

BY = "probe.size.bytes"
RULE = SelectionSpec.model_validate({"every": 2, "epochs": 3, "by": BY, "seed": 7,
                                     "method": "tournament", "tournament": {"size": 2}})


def _record() -> dict[str, Any]:
    candidates = [Candidate(f"pop-{i}", 2, {BY: float(10 * i % 7)}) for i in range(6)]
    decision = decide(candidates, RULE, 1, rng(7, 1), set_name="pop", size=6)
    return {**decision.as_json(), "method": "tournament", "by": BY, "lowest": False,
            "seed": 7, "candidates": {c.name: {"generation": 2, "values": dict(c.values),
                                               "probe_records": {}} for c in candidates}}


def test_a_record_as_decided_follows() -> None:
    assert _check_one("pop", RULE, _record(), {}, 6) == []


def test_an_edited_decision_is_named() -> None:
    record = _record()
    edited = copy.deepcopy(record)
    edited["stopped"], edited["kept"] = record["kept"][:1], record["stopped"] + \
        record["kept"][1:]
    said = _check_one("pop", RULE, edited, {}, 6)
    assert any(line.startswith("selection of set pop, epoch 1: the recorded kept is not "
                               "what the rule decides") for line in said), said


def test_an_edited_value_or_seed_is_named() -> None:
    record = _record()
    record["candidates"]["pop-1"]["values"][BY] = 1000.0
    assert any("the recorded values is not" in line for line in
               _check_one("pop", RULE, record, {}, 6))
    other = _record()
    other["seed"] = 8
    assert "selection of set pop, epoch 1: the record's seed is 8, the spec's 7" in \
        _check_one("pop", RULE, other, {}, 6)


def test_a_probe_record_changed_or_removed_after_the_decision_is_named(
        tmp_path: Path) -> None:
    member = LineageBuilder(tmp_path, "pop-1")
    member.gen("changed")
    commit = member.gen("changed")
    probe = {"name": "size", "digest": "d" * 64, "body": {"run": ["true"], "files": None}}
    write_record(member.paths, probe, ProbeFiles(()), 2, {
        "probe": "size", "digest": "d" * 64, "generation": 2, "commit": commit,
        "metrics": {"bytes": 3.0}, "failure": None})
    record = _record()
    digests = probe_digests(member.paths, 2)
    assert list(digests) == ["size"]
    record["candidates"]["pop-1"]["probe_records"] = digests
    places = {"pop-1": member.paths}
    assert _check_one("pop", RULE, record, places, 6) == []
    repo = pygit2.Repository(str(member.paths.observations))
    repo.references.delete(f"refs/heads/{stored.probe_branch(member.paths.branch)}")
    assert _check_one("pop", RULE, record, places, 6) == [
        "selection of set pop, epoch 1: pop-1's probe records of gen 2 are not the ones "
        "the decision read (changed or removed after it): the decision no longer follows "
        "from the recorded measurements"]
    write_record(member.paths, probe, ProbeFiles(()), 2, {
        "probe": "size", "digest": "d" * 64, "generation": 2, "commit": commit,
        "metrics": {"bytes": 4.0}, "failure": None})  # written again, another value
    assert probe_digests(member.paths, 2) != digests
    assert len(_check_one("pop", RULE, record, places, 6)) == 1
