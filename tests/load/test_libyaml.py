"""libyaml reads good files fast; it must never read them differently from the pure path."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.errors import SpecError
from reconciler.spec import load, yamldocs

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted([*(ROOT / "specs").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml"),
                 *(ROOT / "tests" / "load" / "broken").glob("*.y*ml")])


def _outcome(paths: list[Path], monkeypatch: pytest.MonkeyPatch, fast: bool) -> object:
    monkeypatch.setattr(yamldocs, "HAVE_LIBYAML", fast)
    try:
        return [(s.name, s.sha256, s.spec, s.line) for s in load.load_specs(paths)]
    except SpecError as error:
        return [str(p) for p in error.problems]


def test_libyaml_is_installed() -> None:
    assert yamldocs.HAVE_LIBYAML, "ruamel.yaml.clib is a dependency: pip install -e ."


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_both_parsers_agree_on_every_shipped_and_broken_spec(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _outcome([path], monkeypatch, True) == _outcome([path], monkeypatch, False)


SCALARS = st.sampled_from(["0x10", "1_000", "1:30", "yes", "on", "2026-01-01", "0o14", "012",
                           ".inf", "~", "1e3", "'5'", "!!str 5", "1G", "600s", "-1", '"1.00"',
                           "[1, 2]", "{a: 1}", "&a 3", "null", "true", "1.5"])
FIELDS = st.sampled_from(["generations", "model.budget_usd", "ceilings.memory", "ceilings.wall",
                          "ceilings.tasks", "model.max_output_tokens", "storage.branch"])


@settings(max_examples=60, deadline=None)
@given(values=st.dictionaries(FIELDS, SCALARS, max_size=4))
def test_both_parsers_agree_on_odd_scalars(values: dict[str, str], tmp_path_factory:
                                           pytest.TempPathFactory) -> None:
    sections: dict[str, list[str]] = {"model": ["provider: echo"], "ceilings": [],
                                      "storage": []}
    top = ["generations: 2"]
    for field, value in values.items():
        if "." in field:
            section, key = field.split(".")
            sections[section].append(f"{key}: {value}")
        else:
            top = [f"{field}: {value}"]
    text = "apiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: odd}\nspec:\n"
    text += "".join(f"  {line}\n" for line in top)
    for section, lines in sections.items():
        if lines:
            text += f"  {section}:\n" + "".join(f"    {line}\n" for line in lines)
    path = tmp_path_factory.mktemp("odd") / "odd.yaml"
    path.write_text(text)
    with pytest.MonkeyPatch.context() as patch:
        assert _outcome([path], patch, True) == _outcome([path], patch, False)
