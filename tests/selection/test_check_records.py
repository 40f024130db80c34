"""ouro verify's selection check (issue 39, item 4) on hand-made records: a record as
decided passes; an edited decision, an edited value or another rule is named."""

from __future__ import annotations

import copy
from typing import Any

from reconciler.engine.selection_records import _check_one
from reconciler.plan.selection import Candidate, decide, rng
from reconciler.spec.selection import SelectionSpec

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
