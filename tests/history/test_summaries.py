"""The summary cache: derived incrementally, keyed by the heads, never trusted blindly."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.state import summaries
from reconciler.state.summaries import summarize
from tests.observe.builder import LineageBuilder

CALL = {"http_status": 200, "usage": {"input_tokens": 10, "output_tokens": 4},
        "accounted_usd": "0.01", "reserved_usd": "0.05"}
FAILED = {"http_status": 502, "error": "model_unavailable", "accounted_usd": "0",
          "reserved_usd": "0.05"}


def _grown(tmp_path: Path) -> LineageBuilder:
    builder = LineageBuilder(tmp_path)
    builder.gen("changed", calls=[CALL], cpu_usage_nsec=2_000_000_000)
    builder.external_edit()
    builder.gen("died", calls=[CALL, CALL])
    builder.gen("no-change", calls=[FAILED])
    return builder


def _cache_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.json"))


def test_rows_from_a_lineage(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    summary = summarize(builder.paths)
    assert [row.status for row in summary.rows] == ["changed", "died", "no-change"]
    first, died, failed = summary.rows
    assert (first.tokens_in, first.tokens_out, first.spend_usd) == (10, 4, "0.01")
    assert first.cpu_seconds == 2.0 and first.organism_added == 1 and first.paths_changed == 1
    assert died.death_cause == "process_exit" and died.exit_status == 3
    assert died.external_edits_before == 1 and first.external_edits_before == 0
    assert failed.model_failure == "model_unavailable" and first.model_failure is None
    assert summary.spend_usd == summary.spend_usd.__class__("0.03")
    assert summary.outcomes == {"changed": 1, "no-change": 1, "died": 1}
    assert summary.death_kinds == {"process_exit": 1}
    assert summary.journal_heading is not None and "gen 3" in summary.journal_heading


def test_cache_is_used_then_extended_incrementally(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    cache = tmp_path / "cache"
    cold = summarize(builder.paths, cache)
    assert not cold.from_cache and len(_cache_files(cache)) == 1
    warm = summarize(builder.paths, cache)
    assert warm.from_cache and warm.rows == cold.rows
    builder.external_edit("more.txt")
    builder.gen("changed", calls=[CALL])
    extended = summarize(builder.paths, cache)
    assert not extended.from_cache and extended.generations == 4
    assert extended.rows == summarize(builder.paths).rows  # incremental == from scratch
    assert extended.rows[3].external_edits_before == 1


def test_trailing_edit_is_carried_into_the_next_generation(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    cache = tmp_path / "cache"
    builder.external_edit("trailing.txt")
    assert summarize(builder.paths, cache).trailing_edits == 1
    builder.gen("no-change")
    assert summarize(builder.paths, cache).rows[-1].external_edits_before == 1


def _read(path: Path) -> tuple[dict[str, Any], list[list[Any]]]:
    header_line, rows_line = path.read_bytes().split(b"\n", 1)
    header = json.loads(header_line)
    header.pop("sha256")
    return header, json.loads(rows_line)


def _write(path: Path, header: dict[str, Any], rows: list[list[Any]], *,
           reseal: bool = True) -> None:
    body = json.dumps(rows).encode()
    if reseal:  # a consistent forgery: digests recomputed
        header["rows_sha256"] = hashlib.sha256(body).hexdigest()
    header["sha256"] = summaries._digest({k: v for k, v in header.items() if k != "sha256"})
    path.write_bytes(json.dumps(header).encode() + b"\n" + body)


SPEND = summaries.COLUMNS.index("spend_usd")


@pytest.mark.parametrize("damage", ["garbage", "digest", "rows", "key", "columns"])
def test_a_damaged_cache_is_rebuilt_not_trusted(tmp_path: Path, damage: str) -> None:
    builder = _grown(tmp_path)
    cache = tmp_path / "cache"
    truth = summarize(builder.paths, cache)
    [path] = _cache_files(cache)
    if damage == "garbage":
        path.write_bytes(b"\x00{not json")
    else:
        header, rows = _read(path)
        if damage == "digest":  # a lie about the spend, with the old digests
            rows[0][SPEND] = "999"
            _write(path, header, rows, reseal=False)
        elif damage == "rows":  # consistent digests, wrong numbering
            _write(path, header, rows[1:])
        elif damage == "key":
            header["key"] = "0" * 32
            _write(path, header, rows)
        else:
            header["columns"] = header["columns"][::-1]
            _write(path, header, rows)
    again = summarize(builder.paths, cache)
    assert not again.from_cache and again.rows == truth.rows
    assert summaries.totals(builder.paths, cache).spend_usd == truth.spend_usd


def test_totals_read_the_header_alone(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    cache = tmp_path / "cache"
    truth = summarize(builder.paths, cache)
    [path] = _cache_files(cache)
    header_line = path.read_bytes().split(b"\n", 1)[0]
    path.write_bytes(header_line + b"\n[[\"the rows are not read\"]]")
    found = summaries.totals(builder.paths, cache)
    assert (found.generations, found.spend_usd, found.outcomes) == (
        truth.generations, truth.spend_usd, truth.outcomes)
    assert summarize(builder.paths, cache).rows == truth.rows  # rows: rebuilt


def test_a_cache_of_another_history_is_not_extended(tmp_path: Path) -> None:
    """A cache whose lineage head is no longer on the branch (history rewritten) is
    rebuilt from scratch, never extended."""
    builder = _grown(tmp_path)
    cache = tmp_path / "cache"
    summarize(builder.paths, cache)
    [path] = _cache_files(cache)
    header, rows = _read(path)
    header["lineage_head"] = "1" * 40
    rows[0][SPEND] = "999"
    _write(path, header, rows)
    again = summarize(builder.paths, cache)
    assert again.rows[0].spend_usd == "0.01"


def test_an_unwritable_cache_is_skipped(tmp_path: Path) -> None:
    builder = _grown(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert summarize(builder.paths, blocker / "cache").generations == 3


def test_the_original_instruments_lineage(original_lineage: Path) -> None:
    from reconciler.spec.load import default_places

    summary = summarize(default_places(original_lineage, "fixture"))
    assert summary.generations == 5
    assert [row.status for row in summary.rows] == [
        "no-change", "no-change", "no-change", "died", "no-change"]
    assert summary.rows[3].exit_status == 3
    assert summary.rows[0].model_failure == "model_unavailable"
    assert summary.rows[3].external_edits_before == 1


def test_no_observations_at_all(sample_lineage: Path) -> None:
    """The older instrument's lineage has no observation repository: rows, no numbers."""
    from reconciler.kernel.base.config import LineagePaths

    repo_git = sample_lineage / ".git"
    import pygit2

    branch = pygit2.Repository(str(sample_lineage)).head.shorthand
    paths = LineagePaths(sample_lineage, repo_git, sample_lineage.with_name("none"),
                         branch, f"observations/{branch}")
    summary = summarize(paths)
    assert summary.generations > 0 and not any(row.observed for row in summary.rows)
    assert all(row.spend_usd is None for row in summary.rows)


def test_status_skips_sizes_and_rows_complete_them(tmp_path: Path) -> None:
    """Status (totals) derives no organism sizes; log then completes the same cache."""
    builder = _grown(tmp_path)
    cache = tmp_path / "cache"
    truth = summarize(builder.paths)
    assert summaries.totals(builder.paths, cache).generations == 3
    [path] = _cache_files(cache)
    header, rows = _read(path)
    assert header["sized"] is False
    assert {row[summaries.COLUMNS.index("organism_bytes")] for row in rows} == {None}
    builder.gen("changed")  # and the lineage grew meanwhile
    grown = summarize(builder.paths, cache)
    assert grown.rows == summarize(builder.paths).rows
    assert grown.rows[:3] == truth.rows and grown.rows[0].organism_bytes
    assert _read(path)[0]["sized"] is True
    builder.gen("no-change")
    assert summaries.totals(builder.paths, cache).generations == 5
    assert _read(path)[0]["sized"] is True  # a sized cache stays sized
