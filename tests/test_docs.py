"""The docs say what the code does: every OURO_* variable in docs/commands.md's table
(which README links to), the unit
table of docs/spec.md equal to the parsers' units, echo described as it behaves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reconciler.kernel.broker.providers import EchoProvider
from reconciler.spec import units

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SPEC_DOC = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
COMMANDS_DOC = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
# The variables ouro reads: every quoted "OURO_..." string (a constant named OURO_... is not).
_QUOTED = re.compile(r"""["'](OURO_[A-Z][A-Z_]*[A-Z])["']""")
VARIABLES = sorted({name for path in [*ROOT.glob("reconciler/**/*.py"), *ROOT.glob("bench/*.py")]
                    for name in _QUOTED.findall(path.read_text())})


def test_the_code_reads_some_variables() -> None:
    assert "OURO_STATE_DIR" in VARIABLES and "OURO_INSTRUMENT_COMMIT" in VARIABLES


@pytest.mark.parametrize("name", VARIABLES)
def test_every_environment_variable_is_documented(name: str) -> None:
    """In docs/commands.md's table of variables, one a row (README, a user's page, links
    there rather than repeating it)."""
    rows = re.findall(r"^\| (`OURO_[^|]*)\|", COMMANDS_DOC, re.M)
    assert any(f"`{name}`" in row for row in rows), (
        f"{name} is read by ouro but docs/commands.md's variables table has no row for it")
    assert "$OURO_STATE_DIR" in README and "(docs/commands.md)" in README


def _unit_row(kind: str) -> str:
    row = re.search(rf"^\| {kind} \| ([^|]*) \|", SPEC_DOC, re.M)
    assert row, f"docs/spec.md has no '| {kind} |' row"
    return row[1]


def test_the_duration_units_are_the_parsers() -> None:
    documented = set(re.findall(r"`([a-z]+)`", _unit_row("duration")))
    assert documented == set(units._DURATION_UNITS)
    for unit, seconds in units._DURATION_UNITS.items():
        assert units.parse_duration(f"2{unit}") == 2 * seconds


def test_the_size_units_are_the_parsers() -> None:
    documented = set(re.findall(r"`([A-Za-z]+)`", _unit_row("size")))
    assert documented == set(units._SIZE_SHIFTS) - {""}


def test_echo_is_described_as_it_behaves() -> None:
    reply = EchoProvider().attempt("a prompt", 100, 1.0)
    assert reply.text == ""
    assert "`echo` answers every\nrequest with an empty reply" in SPEC_DOC
    assert "its own prompt" not in SPEC_DOC


DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(document: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", document.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {_slug(m[1]) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_link_resolves(document: Path) -> None:
    """A relative link names a file that exists, and an anchor a heading it has."""
    text = re.sub(r"^```.*?^```", "", document.read_text(encoding="utf-8"), flags=re.M | re.S)
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto: — not ours to check offline
        path, _, anchor = target.partition("#")
        place = (document.parent / path).resolve() if path else document
        if not place.exists():
            broken.append(f"{target}: no {place}")
        elif anchor and place.suffix == ".md" and anchor not in _anchors(place):
            broken.append(f"{target}: {place.name} has no heading #{anchor}")
    assert not broken, f"{document.name}: " + "; ".join(broken)
