"""Saved plans: versioned, type-checked on read, and stale as soon as a head moves."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from reconciler.errors import PlanFileError
from reconciler.kernel.base.config import Identity
from reconciler.plan import LineagePlan, Plan
from reconciler.plan.saved import PLANFILE_FORMAT, check_fresh, load_plan, save_plan

ME = Identity("r", "main", "a" * 40, "b" * 64)


@dataclass(frozen=True)
class Heads:
    lineage_head: str | None
    observation_head: str | None


def _plan() -> Plan:
    item = LineagePlan(
        name="alpha", action="extend", reason=None, message="m", observed_generations=1,
        desired_generations=3, missing_generations=2, max_spend_usd=Decimal("2.00"),
        changes=(), heads={"lineage": "1" * 40, "observation": "2" * 40},
        spec_sha256="c" * 64,
        branches={"lineage": "lineage-alpha", "observation": "observations/lineage-alpha"},
    )
    return Plan(lineages=(item,), instrument=ME, counts={"extend": 1})


def test_round_trip(tmp_path: Path) -> None:
    target = tmp_path / "out" / "plan.json"
    save_plan(_plan(), target)
    saved = load_plan(target)
    assert saved.format == PLANFILE_FORMAT
    assert (saved.instrument_commit, saved.instrument_fingerprint) == (ME.commit, ME.fingerprint)
    (alpha,) = saved.lineages
    assert (alpha.lineage_head, alpha.observation_head) == ("1" * 40, "2" * 40)
    assert alpha.max_spend_usd == Decimal("2.00") and alpha.spec_sha256 == "c" * 64
    assert [p.name for p in target.parent.iterdir()] == ["plan.json"]  # no temp file left


def test_fresh_plan(tmp_path: Path) -> None:
    save_plan(_plan(), tmp_path / "p.json")
    saved = load_plan(tmp_path / "p.json")
    assert check_fresh(saved, {"alpha": Heads("1" * 40, "2" * 40)}, instrument=ME,
                       spec_digests={"alpha": "c" * 64}) == []


@pytest.mark.parametrize(
    ("now", "digests", "instrument", "expected"),
    [
        ({"alpha": Heads("9" * 40, "2" * 40)}, None, None,
         "lineage alpha: refs/heads/lineage-alpha moved from 1111"),
        ({"alpha": Heads("1" * 40, None)}, None, None,
         "lineage alpha: refs/heads/observations/lineage-alpha moved from 2222"),
        ({}, None, None, "lineage alpha: in the plan but not observed now"),
        ({"alpha": Heads("1" * 40, "2" * 40)}, {"alpha": "d" * 64}, None,
         "lineage alpha: its spec changed"),
        ({"alpha": Heads("1" * 40, "2" * 40)}, None, Identity("r", "m", "e" * 40, "b" * 64),
         "instrument: the plan was made by aaaa"),
    ],
    ids=["lineage-moved", "observations-moved", "lineage-gone", "spec-changed",
         "other-instrument"],
)
def test_stale_plan(tmp_path: Path, now: dict[str, Heads], digests: dict[str, str] | None,
                    instrument: Identity | None, expected: str) -> None:
    save_plan(_plan(), tmp_path / "p.json")
    stale = check_fresh(load_plan(tmp_path / "p.json"), now, instrument=instrument,
                        spec_digests=digests)
    assert any(line.startswith(expected) for line in stale), stale


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "cannot read"),
        ('{"format": "other"}', "is not an ouro-plan-file/v1"),
        (None, "lineages[0]: field 'observed_generations'"),
    ],
    ids=["not-json", "wrong-format", "wrong-type"],
)
def test_unreadable_plan_file(tmp_path: Path, content: str | None, fragment: str) -> None:
    target = tmp_path / "p.json"
    if content is None:
        save_plan(_plan(), target)
        document = json.loads(target.read_text())
        document["lineages"][0]["observed_generations"] = "1"
        content = json.dumps(document)
    target.write_text(content, encoding="utf-8")
    with pytest.raises(PlanFileError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        load_plan(target)


def test_missing_plan_file(tmp_path: Path) -> None:
    with pytest.raises(PlanFileError):
        load_plan(tmp_path / "absent.json")
