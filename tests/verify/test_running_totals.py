"""The audit of running totals (physics release 4): an observation that records
``running_totals`` holds exactly the kernel's totals through its generation (the rule is
``reconciler.kernel.base.totals``; the kernel's ``generation._totals_before`` picks what
they add to), one finding per generation that does not; and a resumed audit checks its
new generations reading only the one earlier record it needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base import totals
from reconciler.state import audit, audit_record
from reconciler.state.audit import CODES, LineageAudit, audit_lineage
from reconciler.state.audit_record import audit_recorded
from tests.kernel_generation.helpers import Fake
from tests.kernel_generation.helpers import Lineage as KernelLineage
from tests.verify.builder import SEED, Lineage
from tests.verify.test_kernel_lineages import Run, call, grow

Tamper = Callable[[dict[str, Any]], Any]
GROWN = SEED + b'(message "grown")\n'


@dataclass
class Totalled(Lineage):
    """A lineage whose observations record running totals as the kernel records them:
    through generation N, from observation N-1's totals when they read and count N-1
    generations, else from the fold over every earlier record.

    ``tamper``: generation -> what it records instead of the right totals (given them);
    ``without``: generations recorded without totals (before release 4); ``invalid``:
    generations whose record is invalid (no budget), which the audit reads nothing from:
    later totals add them up as ``{}``."""

    tamper: dict[int, Tamper] = field(default_factory=dict)
    without: set[int] = field(default_factory=set)
    invalid: set[int] = field(default_factory=set)
    seen: dict[int, dict[str, Any]] = field(default_factory=dict)  # as the audit reads them

    def write_observation(self, n: int, record: dict[str, Any], subject_outcome: str) -> None:
        if n not in self.without:
            right = totals.to_json(totals.advance(self._before(n), record))
            record = {**record, totals.TOTALS_KEY: self.tamper.get(n, _unchanged)(right)}
        if n in self.invalid:
            record = {**record, "constraints": {}}
        self.seen[n] = {} if n in self.invalid else record
        super().write_observation(n, record, subject_outcome)

    def _before(self, n: int) -> totals.RunningTotals:
        recorded = totals.from_json(self.seen.get(n - 1, {}).get(totals.TOTALS_KEY))
        if recorded is not None and recorded.generations == n - 1:
            return recorded
        before = totals.RunningTotals()
        for k in range(1, n):
            before = totals.advance(before, self.seen.get(k, {}))
        return before


def _unchanged(right: dict[str, Any]) -> Any:
    return right


def failed_call(n: int) -> dict[str, Any]:
    return {**Lineage.call(n, accounted=None), "http_status": 500, "error": "server_error"}


# one of each: no-change with spend, changed with two calls, a death, a failed model call
STEPS: list[Callable[[Totalled], object]] = [
    lambda lin: lin.no_change(),
    lambda lin: lin.changed({"organism.el": GROWN},
                            calls=[lin.call(2, "0.02"), lin.call(2, "0.03")]),
    lambda lin: lin.died(),
    lambda lin: lin.no_change(calls=[failed_call(4)]),
    lambda lin: lin.changed({"notes.txt": b"n\n"}, calls=[lin.call(5, "0.25", "0.25")]),
]


def grown(root: Path, upto: int = len(STEPS), **options: Any) -> Totalled:
    lineage = Totalled.create(root)
    assert isinstance(lineage, Totalled)
    for key, value in options.items():
        setattr(lineage, key, value)
    for step in STEPS[:upto]:
        step(lineage)
    return lineage


def findings(result: LineageAudit) -> set[tuple[str, int | None]]:
    assert result.status != "unknown", result
    return {(f.code, f.generation) for f in result.findings}


def audited(lineage: Lineage) -> set[tuple[str, int | None]]:
    return findings(audit_lineage(lineage.paths, lineage.name))


def test_the_code_is_described() -> None:
    assert "running_totals" in CODES["running-totals-mismatch"]


# ------------------------------------------------------------------ full audits


def test_consistent_totals_pass(tmp_path: Path) -> None:
    lineage = grown(tmp_path)
    result = audit_lineage(lineage.paths, lineage.name)
    assert (result.status, result.findings, result.generations) == ("consistent", (), 5)
    # the records really carry the totals, and they say what the history holds
    assert lineage.observation_record(5)[totals.TOTALS_KEY] == {
        "schema": "ouro-running-totals/v1", "generations": 5,
        "outcomes": {"changed": 2, "no-change": 2, "died": 1},
        "death_kinds": {"process_exit": 1}, "model_failures": 1, "spend_usd": "0.36",
    }


def _set(path: str, value: object) -> Tamper:
    def tamper(right: dict[str, Any]) -> Any:
        *parents, last = path.split(".")
        place = right
        for name in parents:
            place = place[name]
        place[last] = value
        return right

    return tamper


def _plus(path: str, step: int) -> Tamper:
    def tamper(right: dict[str, Any]) -> Any:
        *parents, last = path.split(".")
        place = right
        for name in parents:
            place = place[name]
        place[last] += step
        return right

    return tamper


TAMPERED: dict[str, Tamper] = {
    # well-formed totals that count wrong
    "one no-change too few": _plus("outcomes.no-change", -1),
    "one generation too many": _plus("generations", 1),
    "one model failure too many": _plus("model_failures", 1),
    "another death kind": _set("death_kinds", {"signal": 1}),
    "wrong spend": _set("spend_usd", "0.07"),
    "the right spend, written otherwise": _set("spend_usd", "0.060"),
    # not totals at all
    "spend as a number": _set("spend_usd", 0.06),
    "a count as a boolean": _set("outcomes.died", True),
    "wrong schema": _set("schema", "ouro-running-totals/v2"),
    "an extra key": lambda right: {**right, "note": "x"},
    "null": lambda right: None,
    "a list": lambda right: [right],
    "a string": lambda right: "3 generations",
}


@pytest.mark.parametrize("tamper", TAMPERED.values(), ids=TAMPERED.keys())
def test_wrong_totals_are_found_at_their_generation_only(
    tmp_path: Path, tamper: Tamper
) -> None:
    """Generation 3's totals are wrong; 4 and 5 add up from them as the kernel would
    (from 3's totals if they read, else from the records): only 3 is a finding."""
    lineage = grown(tmp_path, tamper={3: tamper})
    assert audited(lineage) == {("running-totals-mismatch", 3)}


@pytest.mark.parametrize("generation", [1, 2, 5])
def test_wrong_spend_is_found_at_any_generation(tmp_path: Path, generation: int) -> None:
    lineage = grown(tmp_path, tamper={generation: _set("spend_usd", "9.99")})
    assert audited(lineage) == {("running-totals-mismatch", generation)}


def test_totals_that_skip_a_record_are_found(tmp_path: Path) -> None:
    """Generation 3 adds itself to generation 1's totals, as if 2 were not there."""
    lineage = grown(tmp_path, upto=2)
    skipped = totals.advance(totals.from_json(lineage.observation_record(1)[
        totals.TOTALS_KEY]) or totals.RunningTotals(), {"outcome": "process_exit"})
    lineage.tamper[3] = lambda right: totals.to_json(skipped)
    for step in STEPS[2:]:
        step(lineage)
    assert audited(lineage) == {("running-totals-mismatch", 3)}


@pytest.mark.parametrize("without", [{1}, {2}, {1, 2}, {3, 4}, {5}, {1, 2, 3, 4, 5}])
def test_records_without_totals_are_not_checked_and_a_gap_adds_up_the_records(
    tmp_path: Path, without: set[int]
) -> None:
    """A record without totals (before release 4) is no finding; the next one with totals
    adds up every record before it."""
    lineage = grown(tmp_path, without=without)
    assert audited(lineage) == set()
    assert all(totals.TOTALS_KEY not in lineage.observation_record(n) for n in without)


def test_a_gap_whose_next_totals_start_over_is_found(tmp_path: Path) -> None:
    """After a record without totals, totals counting only from there are wrong."""
    lineage = grown(tmp_path, upto=2, without={2})
    lineage.tamper[3] = lambda right: totals.to_json(
        totals.advance(totals.RunningTotals(), {"outcome": "process_exit"}))
    for step in STEPS[2:]:
        step(lineage)
    assert audited(lineage) == {("running-totals-mismatch", 3)}


def test_an_invalid_record_counts_as_nothing(tmp_path: Path) -> None:
    """Nothing is read from an invalid record, its totals included: the next totals add
    it up as ``{}`` (had the audit believed its totals, 3 would be a finding)."""
    lineage = grown(tmp_path, invalid={2})
    assert totals.from_json(lineage.observation_record(2)[totals.TOTALS_KEY]) is not None
    assert audited(lineage) == {("observation-invalid", 2)}


def test_totals_after_an_invalid_record_that_count_it_are_found(tmp_path: Path) -> None:
    lineage = grown(tmp_path, upto=2, invalid={2})
    lineage.seen[2] = lineage.observation_record(2)  # as if its record counted
    for step in STEPS[2:]:
        step(lineage)
    assert audited(lineage) == {("observation-invalid", 2), ("running-totals-mismatch", 3)}


def test_a_missing_record_counts_as_nothing(tmp_path: Path) -> None:
    lineage = grown(tmp_path, upto=1)
    lineage.no_change(observe=False)  # generation 2 has no observation
    for step in STEPS[2:]:
        step(lineage)
    assert audited(lineage) == {("observation-missing", 2)}


# ------------------------------------------------------------------ resumed audits


def _records(tmp_path: Path) -> Path:
    return tmp_path / "state" / ".audits"


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The generations whose observation records the audit parses, in order."""
    read: list[int] = []
    original = audit._valid_record

    def spy(raw: bytes | None, number: int) -> dict[str, Any] | None:
        read.append(number)
        return original(raw, number)

    monkeypatch.setattr(audit, "_valid_record", spy)
    return read


def test_a_resumed_audit_reads_only_the_new_records_and_the_one_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lineage = grown(tmp_path, upto=3)
    first = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (first.status, first.resumed) == ("consistent", 0)
    for step in STEPS[3:]:
        step(lineage)
    read = _reads(monkeypatch)
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (result.status, result.resumed, result.generations) == ("consistent", 3, 5)
    assert sorted(read) == [3, 4, 5]
    read.clear()
    again = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (again.status, again.resumed, read) == ("consistent", 5, [])


@pytest.mark.parametrize("generation", [4, 5])
def test_a_resumed_audit_finds_wrong_new_totals_and_keeps_finding_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, generation: int
) -> None:
    lineage = grown(tmp_path, upto=3, tamper={generation: _plus("model_failures", 1)})
    assert audit_recorded(lineage.paths, lineage.name, _records(tmp_path)).resumed == 0
    for step in STEPS[3:]:
        step(lineage)
    read = _reads(monkeypatch)
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (result.resumed, findings(result)) == (3, {("running-totals-mismatch", generation)})
    assert sorted(read) == [3, 4, 5]
    # a verdict with findings is not recorded: the next audit is full, and says the same
    again = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (again.resumed, findings(again)) == (0, {("running-totals-mismatch", generation)})


def test_a_resumed_audit_whose_earlier_record_has_no_totals_adds_up_every_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lineage whose records had no totals when last audited: its first record with
    totals is checked against all earlier records, read again for that (once)."""
    lineage = grown(tmp_path, upto=3, without={1, 2, 3})
    assert audit_recorded(lineage.paths, lineage.name, _records(tmp_path)).resumed == 0
    lineage.tamper[5] = _set("spend_usd", "0.35")
    for step in STEPS[3:]:
        step(lineage)
    read = _reads(monkeypatch)
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (result.resumed, findings(result)) == (3, {("running-totals-mismatch", 5)})
    assert sorted(read) == [1, 2, 3, 4, 5]


def test_the_audit_record_vouches_for_the_totals_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change of the totals rule re-checks every lineage (``audit_version``)."""
    read: list[Path] = []
    original = Path.read_bytes

    def spy(self: Path) -> bytes:
        read.append(self.resolve())
        return original(self)

    monkeypatch.setattr(audit_record, "_version", None)
    monkeypatch.setattr(Path, "read_bytes", spy)
    audit_record.audit_version()
    assert Path(totals.__file__).resolve() in read


# ------------------------------------------------------------------ the kernel's own


def test_a_kernel_grown_lineage_records_totals_that_verify(
    born: KernelLineage, fake: Fake, run_fake: Run
) -> None:
    grow(born, fake, run_fake)
    records = [born.observation(n) for n in range(1, 7)]
    assert all(totals.from_json(r.get(totals.TOTALS_KEY)) is not None for r in records)
    last = totals.from_json(records[-1][totals.TOTALS_KEY])
    assert last is not None and (last.generations, dict(last.outcomes)) == (
        6, {"changed": 2, "no-change": 2, "died": 2})
    result = audit_lineage(born.paths, "test")
    assert (result.status, result.findings) == ("consistent", ())


def test_a_kernel_grown_lineage_verifies_when_resumed(
    tmp_path: Path, born: KernelLineage, fake: Fake, run_fake: Run,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    grow(born, fake, run_fake)
    first = audit_recorded(born.paths, "test", _records(tmp_path))
    assert (first.status, first.resumed) == ("consistent", 0)
    fake.calls = [call("0.10")]
    run_fake()
    run_fake()
    read = _reads(monkeypatch)
    result = audit_recorded(born.paths, "test", _records(tmp_path))
    assert (result.status, result.resumed, result.generations) == ("consistent", 6, 8)
    assert sorted(read) == [6, 7, 8]
