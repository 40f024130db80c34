"""Status's totals from the running totals the kernel records (physics release 4): the
newest observation alone, believed only where it describes today's history."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from reconciler.kernel.base import formats, totals
from reconciler.state import summaries
from tests.observe.builder import LineageBuilder

CALL = {"http_status": 200, "usage": {"input_tokens": 10, "output_tokens": 4},
        "accounted_usd": "0.01", "reserved_usd": "0.05"}
FAILED = {"http_status": 502, "error": "model_unavailable", "accounted_usd": "0",
          "reserved_usd": "0.05"}


def _grown(tmp_path: Path, *, running_totals: bool = True) -> LineageBuilder:
    builder = LineageBuilder(tmp_path, running_totals=running_totals)
    builder.gen("changed", calls=[CALL], cpu_usage_nsec=2_000_000_000)
    builder.external_edit()
    builder.gen("died", calls=[CALL, CALL])
    builder.gen("no-change", calls=[FAILED])
    builder.gen("died", outcome="wall_timeout")
    return builder


def _derived(builder: LineageBuilder) -> summaries.Totals:
    return summaries.totals_of(summaries.summarize(builder.paths))


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("derived from every record")


@pytest.fixture
def no_derivation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if status derives the totals from every record."""
    monkeypatch.setattr(summaries, "_guarded", _refuse)


def test_status_reads_the_newest_observation_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder = _grown(tmp_path)
    builder.external_edit("trailing.txt")  # a hand's commit after the newest generation
    derived = _derived(builder)
    assert derived.outcomes == {"changed": 1, "no-change": 1, "died": 2}
    assert derived.death_kinds == {"process_exit": 1, "wall_timeout": 1}
    assert (derived.model_failures, derived.spend_usd) == (1, Decimal("0.03"))
    read: list[str] = []
    json_of = summaries.Repo.json_of

    def counting(self: summaries.Repo, oid: object, what: str, **kwargs: object) -> object:
        read.append(what)
        return json_of(self, oid, what, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(summaries.Repo, "json_of", counting)
    monkeypatch.setattr(summaries, "_guarded", _refuse)  # (after the derivation above)
    cache = tmp_path / "cache"
    assert summaries.totals(builder.paths, cache) == derived
    assert read == [formats.observation_path(4)]


def test_the_recorded_totals_are_cached_without_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder = _grown(tmp_path)
    derived, cache = _derived(builder), tmp_path / "cache"
    with monkeypatch.context() as patched:
        patched.setattr(summaries, "_guarded", _refuse)
        assert summaries.totals(builder.paths, cache) == derived
    [written] = sorted(cache.glob("*.json"))
    assert b"\n" not in written.read_bytes()  # the header alone: nothing was derived
    with monkeypatch.context() as patched:  # the next status reads that file alone
        patched.setattr(summaries, "_recorded_totals", _refuse)
        patched.setattr(summaries, "_guarded", _refuse)
        assert summaries.totals(builder.paths, cache) == derived
    summary = summaries.summarize(builder.paths, cache)  # log derives the rows, and caches
    assert not summary.from_cache and len(summary.rows) == 4
    assert summaries.totals_of(summary) == derived
    assert summaries.summarize(builder.paths, cache).from_cache
    builder.gen("changed", calls=[CALL])  # a new generation: the header is today's no more
    assert summaries.totals(builder.paths, cache).generations == 5


@pytest.mark.usefixtures("no_derivation")
def test_discarded_attempts_spend_is_added(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    builder._observe({f"{formats.INTERRUPTED_DIR}/0005-attempt.json": json.dumps(
        {"model_calls": [CALL, CALL]}).encode()}, "interrupted: gen 5")
    assert summaries.totals(builder.paths).spend_usd == Decimal("0.05")


def _reads_every_record(builder: LineageBuilder) -> None:
    """The recorded totals are not believed: status derives them, as it did before."""
    assert summaries._recorded_totals(builder.paths, (None, None)) is None
    assert summaries.totals(builder.paths) == _derived(builder)


def test_a_lineage_without_running_totals_is_derived(tmp_path: Path) -> None:
    builder = _grown(tmp_path, running_totals=False)
    _reads_every_record(builder)
    assert summaries.totals(builder.paths).generations == 4


def test_a_generation_commit_without_its_observation(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    builder.gen("no-change", observe=False)
    _reads_every_record(builder)


def test_a_hand_made_generation_commit_at_the_head(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    builder.hand_commit("gen 4: no-change")  # names the newest observation's number
    _reads_every_record(builder)
    assert summaries.totals(builder.paths).generations == 5


def test_an_unparsable_generation_subject_at_the_head(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    builder.hand_commit("gen four: no-change")
    _reads_every_record(builder)


@pytest.mark.parametrize("damage", [
    pytest.param(lambda t: {**t, "generations": 3}, id="count-of-another-generation"),
    pytest.param(lambda t: {**t, "schema": "ouro-running-totals/v0"}, id="other-schema"),
    pytest.param(lambda t: {**t, "model_failures": -1}, id="negative"),
    pytest.param(lambda t: {**t, "spend_usd": 0.03}, id="spend-a-float"),
    pytest.param(lambda t: {**t, "outcomes": {"changed": 9, "no-change": 0, "died": 0}},
                 id="more-outcomes-than-generations"),
    pytest.param(lambda t: {**t, "extra": 1}, id="an-unknown-key"),
    pytest.param(lambda t: [t], id="not-an-object"),
])
def test_malformed_recorded_totals_are_not_believed(tmp_path: Path, damage: object) -> None:
    builder = _grown(tmp_path)
    good = builder.running
    assert good is not None
    bad = damage(totals.to_json(totals.advance(good, {"outcome": "no-change"})))  # type: ignore[operator]
    builder.gen("no-change", running_totals=bad)
    _reads_every_record(builder)


def test_totals_through_another_generation_are_not_believed(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    earlier = builder.running
    assert earlier is not None
    builder.gen("no-change", running_totals=totals.to_json(earlier))  # well formed, through 4
    _reads_every_record(builder)
    assert summaries.totals(builder.paths).generations == 5


def test_an_unreadable_discarded_attempt_is_left_to_the_derivation(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    builder._observe({f"{formats.INTERRUPTED_DIR}/0005-attempt.json": b"{not json"},
                     "interrupted: gen 5")
    _reads_every_record(builder)
    assert summaries.summarize(builder.paths).problems  # named there


def test_the_cache_still_answers_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = _grown(tmp_path)
    cache = tmp_path / "cache"
    summaries.summarize(builder.paths, cache)  # log, export and view write it
    derived = _derived(builder)
    monkeypatch.setattr(summaries, "_recorded_totals", _refuse)
    assert summaries.totals(builder.paths, cache) == derived


def test_damage_to_an_older_record_is_left_to_log_and_verify(tmp_path: Path) -> None:
    """Status reads no older observation: the totals it shows were recorded as each
    generation was; the derivation (log, export, view) still names the damage."""
    builder = _grown(tmp_path)
    before = _derived(builder)
    builder._observe({formats.observation_path(1): b"{not json"}, "hand: damage gen 1")
    shown = summaries.totals(builder.paths)
    assert (shown.generations, shown.outcomes, shown.spend_usd) == (
        before.generations, before.outcomes, before.spend_usd)
    assert shown.problems == ()
    derived = summaries.summarize(builder.paths)
    assert derived.problems == (f"{formats.GENERATIONS_DIR}/0001.json is unreadable",)
