"""`ouro log`'s columns: a default table within 120 characters, `--columns` choosing any
column of the export, `--format json` as `--json`, the export's rows as jsonl and csv
(the lineages of tests.history.table_fleet, whose values are known by hand)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from reconciler.report.log import log_text
from reconciler.state.probes import ProbeTable
from reconciler.state.summaries import GenerationRow, LineageSummary
from reconciler.state.table import GenerationTable, LineageTable, TableRow
from tests.history.table_fleet import NOTE, grow
from tests.inprocess import ouro
from tests.observe.builder import lineage_paths


@pytest.fixture
def grown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[Path, list[dict[str, Any]], list[str]]:
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    specs = tmp_path / "specs.yaml"
    table, members, _cell = grow(state, specs)
    return specs, table, members


def _log(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         *args: str | Path, code: int = 0) -> str:
    done, out, err = ouro(monkeypatch, capsys, "log", *args)
    assert done == code, err
    return out if code == 0 else err


def test_the_default_table_fits_120_characters(
        grown: tuple[Path, list[dict[str, Any]], list[str]],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    specs, _table, members = grown
    out = _log(monkeypatch, capsys, "--specs", specs, "evo", "kid", "grandkid")
    assert max(len(line) for line in out.splitlines()) <= 120, out
    header = next(line for line in out.splitlines() if line.strip().startswith("gen "))
    assert header.split()[:5] == ["gen", "outcome", "organism", "diff", "calls"]
    assert "kid: 1 generation" in out and f"forked from {members[0]} at gen 2" in out
    assert "grandkid: 1 generation" in out and "forked from kid at gen 1" in out


def test_a_probe_column_that_does_not_fit_is_named(
        grown: tuple[Path, list[dict[str, Any]], list[str]],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """probe.shape.bytes fits; the note (a 26-character cell) would take the table past
    120 characters: it is named under the table; probe.shape.ok, narrower, still fits."""
    specs, _table, members = grown
    out = _log(monkeypatch, capsys, "--specs", specs, members[0])
    assert max(len(line) for line in out.splitlines()) <= 120, out
    lines = out.splitlines()
    header = next(line for line in lines if line.strip().startswith("gen "))
    assert header.split()[-2:] == ["probe.shape.bytes", "probe.shape.ok"]
    assert "(not shown, to fit 120 characters: probe.shape.note; --columns chooses)" in out


def test_columns_choose_any_column_of_the_export(
        grown: tuple[Path, list[dict[str, Any]], list[str]],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    specs, _table, members = grown
    out = _log(monkeypatch, capsys, "--specs", specs, members[0], "--columns",
               "generation,tokens_in,absolute_generation,probe_failure.shape,probe.shape.ok")
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("gen "))
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[start:start + 5]]
    assert rows == [
        ["gen", "tok in", "absolute_generation", "probe_failure.shape", "probe.shape.ok"],
        ["0", "\u2014", "0", "\u2014", "\u2014"],  # row 0: the seed
        ["1", "10", "1", "\u2014", "true"],
        ["2", "10", "2", "exit status 3", "\u2014"],
        ["3", "\u2014", "3", "\u2014", "\u2014"],
    ]
    kid = _log(monkeypatch, capsys, "--specs", specs, "kid", "--columns",
               "absolute_generation,parent_lineage,diff")
    found = [line.split() for line in kid.splitlines()]
    assert ["2", members[0], "\u2014"] in found  # its row 0: the parent's gen 2, no diff
    assert ["3", members[0], "+1/-0", "1p"] in found
    error = _log(monkeypatch, capsys, "--specs", specs, "kid", "--columns", "gen,spend",
                 code=1)
    assert "--columns: no column 'gen', 'spend'" in error and "spend_usd" in error


def test_format_json_is_the_log_document_and_jsonl_csv_the_exports_rows(
        grown: tuple[Path, list[dict[str, Any]], list[str]],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    specs, table, members = grown
    document = json.loads(_log(monkeypatch, capsys, "--specs", specs, members[0],
                               "--format", "json"))
    assert document["kind"] == "ouro-log"
    assert json.loads(_log(monkeypatch, capsys, "--specs", specs, members[0], "--json")) \
        == document
    assert document["lineages"][0]["rows"] == table[:4]  # row 0 (the seed) first
    assert document["lineages"][0]["rows"][1]["probe.shape.note"] == NOTE
    [kid] = json.loads(_log(monkeypatch, capsys, "--specs", specs, "kid", "--format",
                            "json"))["lineages"]
    assert kid["parent"] == {"lineage": members[0], "generation": 2}
    lines = _log(monkeypatch, capsys, "--specs", specs, members[0], "--since", "2",
                 "--format", "jsonl").split("\n")[:-1]
    assert [json.loads(line) for line in lines] == table[2:4]  # --since drops row 0
    text = _log(monkeypatch, capsys, "--specs", specs, members[0], "--deaths",
                "--format", "csv")
    assert list(csv.DictReader(io.StringIO(text))) == []  # no death: the header alone
    assert text.split("\n")[0].split(",")[:3] == ["lineage", "generation", "status"]
    error = _log(monkeypatch, capsys, "--specs", specs, "kid", "--json", "--format", "csv",
                 code=2)
    assert "--json is --format json" in " ".join(error.split())


def test_a_long_outcome_drops_the_columns_that_no_longer_fit(tmp_path: Path) -> None:
    """A death with a model failure and no observation reads as a long outcome: the
    table still fits 120 characters, and says which default columns it left out."""
    facts = GenerationRow(
        generation=12345, status="died", outcome=None, death_cause="decoder_rejection",
        exit_status=255, model_failure="budget_exhausted", organism_bytes=3 << 20,
        organism_added=None, organism_deleted=None, paths_changed=None, model_calls=12,
        tokens_in=None, tokens_out=None, spend_usd="123.456789", cpu_seconds=1234.5,
        memory_peak_bytes=5 << 30, wall_seconds=12345.25, started_at=None,
        external_edits_before=0, provider=None, model=None, lineage_commit="0" * 40,
        observed=False)
    summary = LineageSummary("long", (facts,), None, None, "0", None, 0)
    row = TableRow("long", facts)
    table = GenerationTable((LineageTable("long", lineage_paths(tmp_path, "long"), summary,
                                          (row,), ProbeTable({}, {})),))
    text = log_text(table)
    assert max(len(line) for line in text.splitlines()) <= 120, text
    header = next(line for line in text.splitlines() if line.strip().startswith("gen "))
    assert header.split()[:2] == ["gen", "outcome"]
    assert ("died (decoder_rejection, exit 255) [model: budget_exhausted] [no observation]"
            in text)
    assert "(not shown, to fit 120 characters: " in text and "wall_seconds" in text
