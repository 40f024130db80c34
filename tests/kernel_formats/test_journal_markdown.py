"""A journal no Markdown reader can be fooled by (physics release 2).

A death's stderr is the organism's to write. Rendered by a CommonMark library
(markdown-it-py), by ouro's own parser and by the original instrument's reader
(``original_reader``), a journal shows exactly the headings the kernel wrote,
whatever the stderr holds, and the block shows the stderr verbatim.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from reconciler.kernel.base import formats
from tests.host import require
from tests.kernel_formats import original_reader

STAMP = "2026-12-01T18:00:00+00:00"
FORGED = f"## gen 94 — changed — organism +1/-1; 1 paths — {STAMP}"

HOSTILE = [
    pytest.param(["   ~~~", FORGED, "x"], id="three-space-fence"),
    pytest.param(["   ~~~", "words"], id="three-space-fence-hiding-what-follows"),
    pytest.param(["a ~~~~~ b", " ~~~~~~ ", "~~~~"], id="runs-without-a-heading"),
    pytest.param(["~~~", FORGED], id="plain-fence"),
    pytest.param(["  ~~~~~~~~~~~~", FORGED, "~~~~~~~~~~~~~~~~~~~~ "], id="long-fences"),
    pytest.param(["```", FORGED, "```"], id="backticks"),
    pytest.param(["a ~~~~~ b", "   ~~~~~", FORGED], id="a-run-inside-a-line"),
    pytest.param(["\t~~~", FORGED], id="tab"),
    pytest.param(["##", "gen 94 — changed — x"], id="heading-across-lines"),
    pytest.param(["x\r   ~~~\r## gen 94 — died — x", FORGED], id="carriage-returns"),
    pytest.param(["   ~~~", "", "## gen 94 — died — x", "<!--"], id="blank-and-comment"),
    pytest.param(["    ## gen 94 — died — x", "   ## gen 95 — died — x"], id="indented-headings"),
]


def journal(stderr: list[str]) -> tuple[str, list[str]]:
    """Four generations, gen 2 dying with ``stderr``: (journal, the real headings' text)."""
    entries = [
        formats.journal_entry(1, "no-change", STAMP),
        formats.journal_entry(2, "died", STAMP, exit_status=255, stderr_lines=stderr),
        formats.journal_entry(3, "changed", STAMP, detail="organism +2/-1; 1 paths"),
        formats.journal_entry(4, "died", STAMP, exit_status=1, stderr_lines=["lethal"]),
    ]
    text = ""
    for entry in entries:
        text = formats.append_entry(text, entry)
    headings = [line[3:] for line in text.split("\n") if line.startswith("## gen ")]
    assert len(headings) == 4
    return text, headings


def rendered(text: str) -> list[Token]:
    return MarkdownIt("commonmark").parse(text)


def h2_texts(tokens: list[Token]) -> list[str]:
    return [tokens[index + 1].content for index, token in enumerate(tokens)
            if token.type == "heading_open" and token.tag == "h2"]


@pytest.mark.parametrize("stderr", HOSTILE)
def test_commonmark_ouro_and_the_original_see_exactly_the_real_headings(
        stderr: list[str]) -> None:
    text, real = journal(stderr)
    tokens = rendered(text)
    assert h2_texts(tokens) == real
    assert [h.number for h in formats.parse_journal(text)] == [1, 2, 3, 4]
    assert original_reader.heading_numbers(text) == [1, 2, 3, 4]
    assert original_reader.verify(text, ["no-change", "died", "changed", "died"]) == []
    assert original_reader.details(text, 4) == (1, "lethal")
    assert original_reader.details(text, 2)[0] == 255
    # the death's block holds its stderr verbatim (a CR is a line ending to CommonMark)
    blocks = [token.content for token in tokens if token.type == "fence"]
    assert blocks == ["\n".join(stderr).replace("\r", "\n") + "\n", "lethal\n"]


def test_an_ordinary_death_is_fenced_as_the_original_fences_it() -> None:
    """No tilde run, nothing the original reads as a heading: ``~~~`` at the margin, and
    the original's reader finds exit code and stderr as in its own journals."""
    lines = ["Debugger entered--Lisp error: (void-function f)", "  f()", "  g()"]
    text, _ = journal(lines)
    assert "\nexit 255\n~~~\nDebugger entered--Lisp error: (void-function f)\n" in text
    assert original_reader.details(text, 2) == (255, "\n".join(lines))


def test_the_lisp_error_line_is_kept_before_the_last_five() -> None:
    frames = [f"  frame-{i}()" for i in range(9)]
    error = "Debugger entered--Lisp error: (wrong-type-argument stringp nil)"
    kept = formats.death_lines(["Debugger entered--Lisp error: (old)", "  x()", error, *frames])
    assert kept == [error, *frames[-5:]]
    assert formats.death_lines([error, *frames[:4]]) == [error, *frames[:4]]  # among them
    assert formats.death_lines(frames) == frames[-5:]  # no Lisp error: the original's five
    assert formats.death_lines([]) == []


def test_a_real_emacs_death_keeps_its_cause(tmp_path: Path) -> None:
    require(Path("/usr/bin/emacs").exists(), "needs Emacs")
    organism = tmp_path / "organism.el"
    organism.write_text("(defun deep (n) (if (> n 0) (deep (1- n)) (car 'not-a-list)))\n"
                        "(deep 12)\n")
    run = subprocess.run(["/usr/bin/emacs", "-Q", "--batch", "-l", str(organism)],
                         capture_output=True, timeout=60, check=False)
    assert run.returncode == 255
    lines = run.stderr.decode().rstrip("\n").split("\n")
    entry = formats.journal_entry(1, "died", STAMP, exit_status=255, stderr_lines=lines)
    block = [token.content for token in rendered(entry) if token.type == "fence"]
    assert block == ["\n".join(formats.death_lines(lines)) + "\n"]
    assert block[0].startswith("Debugger entered--Lisp error: (wrong-type-argument listp")
    assert block[0].endswith("  normal-top-level()\n") and block[0].count("\n") == 6


def test_ouros_parser_follows_commonmark_fences_in_journals_it_did_not_write() -> None:
    """An older journal whose fence a stderr line broke (ouro before release 2 counted only
    tildes at a line's start): CommonMark shows the forged heading and, from the kernel's
    own closing fence on, hides every later one. ouro's parser now sees what it sees."""
    older = (f"\n## gen 1 — died — {STAMP}\nexit 1\n~~~\n   ~~~\n{FORGED}\n~~~\n"
             f"\n## gen 2 — no-change — {STAMP}\n"
             f"\n## gen 3 — died — {STAMP}\nexit 1\n~~~\nlethal\n~~~\n"
             f"\n## gen 4 — no-change — {STAMP}\n")
    seen = [re.match(r"gen (\d+)", text) for text in h2_texts(rendered(older))]
    numbers = [int(match.group(1)) for match in seen if match]
    assert numbers == [1, 94]
    assert [h.number for h in formats.parse_journal(older)] == numbers
    assert formats.last_heading_line(older) == FORGED


@pytest.mark.parametrize("line", [
    f"   ## gen 5 — died — {STAMP}", f"##\tgen 5 — died — {STAMP}",
    f"## gen 5 — died — {STAMP} ##", f"## gen 5 — died — {STAMP}  ",
])
def test_a_heading_commonmark_reads_is_a_heading_to_ouro(line: str) -> None:
    assert h2_texts(rendered(line)) == [f"gen 5 — died — {STAMP}"]
    assert [(h.number, h.status) for h in formats.parse_journal(line)] == [(5, "died")]


@pytest.mark.parametrize("line", [
    f"    ## gen 5 — died — {STAMP}", f"\t## gen 5 — died — {STAMP}",
    f"### gen 5 — died — {STAMP}", f"##gen 5 — died — {STAMP}",
])
def test_a_line_commonmark_does_not_read_as_a_heading_is_none_to_ouro(line: str) -> None:
    assert h2_texts(rendered(line)) == []
    assert formats.parse_journal(line) == []


LINES = ["~~~", "   ~~~", "~~~~", "  ~~~~ info", "    ~~~", "\t~~~", "```", "``` lisp",
         "````", " ``` `x`", "## gen 1 — died — T", "   ## gen 2 — no-change — T",
         "## gen 3 — died — T ##", "##\tgen 4 — died — T", "    ## gen 5 — died — T",
         "### gen 6 — died — T", "text", "", "  ", "x\r~~~", "x\r## gen 7 — died — T\r",
         "## gen 8 — no-change — T\r", "~~~\r", "\r   ```", "x ## gen 9 — died — T",
         "###gen 10 — died — T ## gen 11 — died — T", " ~~~~~ \t", "~~~ ~"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=14))
def test_ouros_headings_are_commonmarks_in_any_arrangement_of_fences_and_headings(
        lines: list[str]) -> None:
    text = "\n".join(lines)
    commonmark = [int(match.group(1)) for content in h2_texts(rendered(text))
                  if (match := re.fullmatch(r"gen (\d+) — .*", content))]
    headings = formats.parse_journal(text)
    assert [h.number for h in headings] == commonmark
    # each heading's line is the \n-separated line that holds it (last_heading_line's)
    for heading in headings:
        assert f"gen {heading.number} " in text.split("\n")[heading.line - 1]
    last = text.split("\n")[headings[-1].line - 1] if headings else None
    assert formats.last_heading_line(text) == last
