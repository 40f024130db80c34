"""The lineage's text formats: written and parsed by the same module."""

from __future__ import annotations

import pytest

from reconciler.kernel.base import formats
from reconciler.kernel.base.formats import Change

STAMP = "2026-11-29T15:46:04+00:00"


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("gen 2: changed (organism +12/-3; 3 paths)", (2, "changed")),
        ("gen 8: changed (organism unchanged; 2 other paths)", (8, "changed")),
        ("gen 9: no-change", (9, "no-change")),
        ("gen 10: died (exit 255); staged writes discarded", (10, "died")),
        ("gen 5: changed +0/-0", (5, "changed")),  # the older instrument
        ("gen 1: died (exit 255); reverted", (1, "died")),  # the older instrument
        ("gen 3: something else", (3, None)),
        ("external edit", None),
        ("seed", None),
        ("gen 0: no-change", None),
        ("general cleanup", None),
    ],
    ids=lambda v: str(v),
)
def test_generation_subjects(subject: str, expected: tuple[int, str | None] | None) -> None:
    parsed = formats.parse_generation_subject(subject)
    assert (None if parsed is None else (parsed.number, parsed.status)) == expected


@pytest.mark.parametrize(
    ("change", "subject", "heading_detail"),
    [
        (Change(12, 3, True, 3), "gen 7: changed (organism +12/-3; 3 paths)",
         "organism +12/-3; 3 paths"),
        (Change(0, 0, False, 2), "gen 7: changed (organism unchanged; 2 other paths)",
         "organism unchanged; 2 other paths"),
        (Change(), "gen 7: no-change", None),
    ],
    ids=["organism", "other-paths", "no-change"],
)
def test_change_subjects_and_details(change: Change, subject: str,
                                     heading_detail: str | None) -> None:
    assert formats.subject_changed(7, change) == subject
    assert change.detail == heading_detail
    entry = formats.journal_entry(7, change.status, STAMP, detail=change.detail)
    assert "+0/-0" not in entry
    [heading] = formats.parse_journal(entry)
    assert (heading.number, heading.status, heading.detail) == (7, change.status, heading_detail)


def test_death_entry_keeps_exactly_the_last_five_stderr_lines() -> None:
    lines = [f"frame-{i}()" for i in range(12)]
    entry = formats.journal_entry(10, "died", STAMP, exit_status=255, stderr_lines=lines)
    assert entry == (f"\n## gen 10 — died — {STAMP}\nexit 255\n~~~\n"
                     + "".join(f"frame-{i}()\n" for i in range(7, 12)) + "~~~\n")


def test_stderr_that_imitates_a_heading_is_never_read_as_one() -> None:
    hostile = ["~~~", f"## gen 11 — no-change — {STAMP}", "~~~~~", "## gen 12 — died — x"]
    entry = formats.journal_entry(10, "died", STAMP, exit_status=1, stderr_lines=hostile)
    journal = formats.append_entry(formats.journal_entry(9, "no-change", STAMP), entry)
    assert [h.number for h in formats.parse_journal(journal)] == [9, 10]
    assert formats.last_heading_line(journal) == f"## gen 10 — died — {STAMP}"
    assert "~~~~~~\n" in entry  # a fence longer than any tilde run in the tail


def test_append_entry_starts_after_a_blank_line() -> None:
    assert formats.append_entry("", "\n## x\n") == "\n## x\n"
    assert formats.append_entry("notes", "\n## x\n") == "notes\n\n## x\n"


def test_observation_names() -> None:
    assert formats.observation_path(7) == "generations/0007.json"
    assert formats.parse_observation_path("generations/0007.json") == 7
    assert formats.parse_observation_path("generations/7.json") is None
    assert formats.observation_subject(4, "process_exit") == "observe: gen 4 process_exit"
    assert formats.parse_observation_subject("observe: gen 4 process_exit") == (4, "process_exit")
    assert formats.status_of_outcome("changed — organism +1/-1; 1 paths") == "changed"
    assert formats.status_of_outcome("cgroup_oom") == "died"
    assert formats.status_of_outcome("bogus") is None


def test_the_original_instruments_journals_parse(original_lineage: object,
                                                 sample_lineage: object) -> None:
    from pathlib import Path

    original = (Path(str(original_lineage)) / "journal.md").read_text()
    sample = (Path(str(sample_lineage)) / "journal.md").read_text()
    assert [(h.number, h.status) for h in formats.parse_journal(original)] == [
        (1, "no-change"), (2, "no-change"), (3, "no-change"), (4, "died"), (5, "no-change")]
    assert [(h.number, h.status, h.detail) for h in formats.parse_journal(sample)] == [
        (1, "died", None), (2, "changed", "+197/-43"), (3, "no-change", None),
        (4, "no-change", None), (5, "changed", "+0/-0")]


def test_a_model_failure_note_keeps_the_original_grammar() -> None:
    """Annotated no-change subjects and headings parse as no-change (readers match prefixes)."""
    subject = formats.subject_no_change(4, "model unavailable (401)")
    parsed = formats.parse_generation_subject(subject)
    assert parsed is not None and (parsed.number, parsed.status) == (4, "no-change")
    entry = formats.journal_entry(4, "no-change", "2026-12-01T00:00:00+00:00",
                                  detail="model unavailable (401)")
    (heading,) = formats.parse_journal(entry)
    assert (heading.status, heading.detail) == ("no-change", "model unavailable (401)")
