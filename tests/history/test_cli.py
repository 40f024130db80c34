"""`ouro log`, `show`, `diff`, `export` over a real grown fleet (tests.history.fleet)."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from reconciler.state.table import FIXED_COLUMNS
from tests.apply.helpers import REPO_ROOT, run_ouro
from tests.history.fleet import HOSTILE_STDERR, Fleet

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


def ouro(fleet: Fleet, *args: str, code: int = 0) -> str:
    result = run_ouro(*args, env=fleet.env)
    assert result.returncode == code, result.stdout + result.stderr
    return result.stdout if code == 0 else result.stderr


def test_log_rows(grown_fleet: Fleet) -> None:
    text = ouro(grown_fleet, "log", "story", "quiet")
    assert text.startswith("story: 6 generations, 1 died, 1 model failure, 1 external edit")
    assert "quiet: 3 generations, 0 died" in text
    rows = [line.split() for line in text.splitlines() if re.match(r"\s+\d+\s", line)]
    # row 0 first: the seed
    assert [row[0] for row in rows] == ["0", "1", "2", "3", "4", "5", "6", "0", "1", "2", "3"]
    assert [row[1] for row in rows if row[0] == "0"] == ["seed", "seed"]
    assert "died (process_exit, exit 255)" in text
    assert "[model: replay_exhausted]" in text.splitlines()[8]  # provider_failure.code


def test_log_json_and_filters(grown_fleet: Fleet) -> None:
    document = json.loads(ouro(grown_fleet, "log", "story", "--json"))
    assert document["kind"] == "ouro-log" and document["format_version"] == 1
    [story] = document["lineages"]
    seed, *rows = story["rows"]
    assert (seed["generation"], seed["status"], seed["outcome"]) == (0, "seed", "seed")
    assert [row["generation"] for row in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[3]["status"] == "died" and rows[3]["exit_status"] == 255
    assert rows[3]["external_edits_before"] == 1
    assert rows[5]["model_failure"] == "replay_exhausted"
    assert all(row["memory_peak_bytes"] > 0 and row["cpu_seconds"] > 0 for row in rows)
    assert all(row["organism_bytes"] > 1000 for row in rows)
    deaths = json.loads(ouro(grown_fleet, "log", "story", "--deaths", "--json"))
    assert [row["generation"] for row in deaths["lineages"][0]["rows"]] == [4]
    since = json.loads(ouro(grown_fleet, "log", "story", "--since", "5", "--json"))
    assert [row["generation"] for row in since["lineages"][0]["rows"]] == [5, 6]


def test_show_a_death(grown_fleet: Fleet) -> None:
    text = ouro(grown_fleet, "show", "story", "4")
    assert text.startswith("story gen 4: died (process_exit, exit 255)")
    assert "## gen 4 — died —" in text and "exit 255" in text
    assert "void-function scribe-consolidate-memory" in text  # the stderr tail
    lethal = (REPO_ROOT / "specs" / "replies" / "scribe" / "0003").read_text()
    document = json.loads(ouro(grown_fleet, "show", "story", "4", "--json", "--full"))
    assert document["body"] == lethal  # the committed body that ran and died
    assert lethal.splitlines()[0] in text


def test_show_bounds_prompts_unless_full(grown_fleet: Fleet) -> None:
    short = ouro(grown_fleet, "show", "story", "1")
    full = ouro(grown_fleet, "show", "story", "1", "--full")
    assert "more characters; --full shows all" in short
    assert "--full shows all" not in full and len(full) > len(short)
    assert "## ceilings" in short and '"wall_seconds": 60' in short
    assert "## diff against the previous generation" in short and "+++ b/organism.el" in short


def test_show_the_hostile_death_verbatim_but_inert(grown_fleet: Fleet) -> None:
    text = ouro(grown_fleet, "show", "hostile", "3")
    for line in HOSTILE_STDERR:
        assert line in text


def test_diff_between_generations(grown_fleet: Fleet) -> None:
    text = ouro(grown_fleet, "diff", "story", "3", "5")
    assert "notes.md" in text  # the external edit between them
    assert "modified: organism.el" in text
    assert ouro(grown_fleet, "diff", "story", "5", "5") == "(no changes)\n"
    assert "added: organism.el" not in ouro(grown_fleet, "diff", "story", "0", "1")


def test_export_csv_and_jsonl(grown_fleet: Fleet) -> None:
    table = list(csv.DictReader(io.StringIO(ouro(grown_fleet, "export", "story", "quiet"))))
    assert len(table) == 11 and tuple(table[0]) == FIXED_COLUMNS  # rows 0 too
    assert [row["lineage"] for row in table] == ["story"] * 7 + ["quiet"] * 4
    assert (table[0]["generation"], table[0]["status"], table[0]["spend_usd"]) == (
        "0", "seed", "")
    assert table[4]["death_cause"] == "process_exit" and table[4]["tokens_in"] == ""
    lines = ouro(grown_fleet, "export", "story", "--format", "jsonl").splitlines()
    assert [json.loads(line)["generation"] for line in lines] == [0, 1, 2, 3, 4, 5, 6]
    docs = (REPO_ROOT / "docs" / "export.md").read_text()
    for column in FIXED_COLUMNS:
        assert f"`{column}`" in docs, column


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (("log", "nobody"), "no lineage 'nobody'", 1),
        (("log", "stroy"), "did you mean 'story'", 1),
        (("show", "story", "7"), "has no generation 7 (it has 6: 1..6)", 1),
        (("diff", "story", "2", "9"), "has no generation 9", 1),
        # a value the option does not take is a usage error, as every one is: exit 2
        (("export", "story", "--format", "xlsx"), "is not one of csv, jsonl, json", 2),
    ],
    ids=["unknown", "typo", "show-beyond", "diff-beyond", "format"],
)
def test_bad_input_is_a_clear_error(grown_fleet: Fleet, args: tuple[str, ...],
                                    message: str, code: int) -> None:
    error = ouro(grown_fleet, *args, code=code)
    assert message in error and "Traceback" not in error


def test_names_through_specs(grown_fleet: Fleet) -> None:
    text = ouro(grown_fleet, "log", "scribe", "--specs", str(grown_fleet.specs / "fleet.yaml"))
    assert text.startswith("scribe: 5 generations, 1 died")
