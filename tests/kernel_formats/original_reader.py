"""The original instrument's journal reader, transcribed for tests.

From github.com/scottviteri/ouroboros at 922cd18 (MIT), ``viewer/lineage_reader.py``:
its ``JOURNAL_HEADING``, ``LineageReader._journal_entry``, the exit code and stderr
parsing of ``generation_details`` and the journal half of ``verify``, with git
replaced by the journal's text. Its regular expressions are copied character for
character; it knows nothing of fences, so whatever starts a line with ``## gen N —``
anywhere in journal.md is a heading to it.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["JOURNAL_HEADING", "details", "entry", "heading_numbers", "verify"]

JOURNAL_HEADING = re.compile(
    r"^##\s+gen\s+(?P<number>\d+)\s+[—-]\s+"
    r"(?P<status>changed|no-change|died)\b.*$",
    re.MULTILINE,
)


def entry(journal: str, generation: int) -> dict[str, Any]:
    """``_journal_entry``: the first heading of that number up to the next heading."""
    header = re.compile(
        rf"^##\s+gen\s+{generation}\s+[—-].*$", re.MULTILINE
    ).search(journal)
    if not header:
        return {"found": False, "heading": "", "body": "", "raw": ""}

    following = re.compile(r"^##\s+gen\s+\d+\s+[—-]", re.MULTILINE).search(
        journal, header.end()
    )
    end = following.start() if following else len(journal)
    raw = journal[header.start() : end].strip()
    heading, _, body = raw.partition("\n")
    return {
        "found": True,
        "heading": heading.removeprefix("## ").strip(),
        "body": body.strip(),
        "raw": raw,
    }


def details(journal: str, generation: int) -> tuple[int | None, str]:
    """``generation_details``' reading of an entry: (exit code, stderr tail)."""
    body = entry(journal, generation)["body"]
    exit_match = re.search(r"(?m)^exit\s+(\d+)\s*$", body)
    exit_code = int(exit_match.group(1)) if exit_match else None
    stderr_match = re.search(
        r"(?ms)^~~~[^\n]*\n(.*?)^~~~\s*$", body
    )
    stderr_tail = stderr_match.group(1).rstrip() if stderr_match else ""
    return exit_code, stderr_tail


def heading_numbers(journal: str) -> list[int]:
    """``verify``'s list of the head journal's generation numbers."""
    return [int(match.group("number")) for match in JOURNAL_HEADING.finditer(journal)]


def verify(journal: str, kinds: list[str]) -> list[str]:
    """``verify``'s journal errors for generations 1..N of these kinds (its git half aside)."""
    errors: list[str] = []
    for number, kind in enumerate(kinds, start=1):
        found = entry(journal, number)
        if not found["found"]:
            errors.append(f"generation {number} has no matching journal entry")
            continue
        heading = JOURNAL_HEADING.match(f"## {found['heading']}")
        if not heading:
            errors.append(f"generation {number} has an unparseable journal heading")
        elif heading.group("status") != kind:
            errors.append(f"generation {number} is {kind} in git but "
                          f"{heading.group('status')} in the journal")
    numbers = heading_numbers(journal)
    if numbers != list(range(1, len(kinds) + 1)):
        errors.append(f"HEAD journal generation sequence is {numbers}, "
                      f"expected {list(range(1, len(kinds) + 1))}")
    return errors
