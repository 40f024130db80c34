"""The host Python's path is asked of each system python3 while the specs are parsed
(``places.ask_python_paths``): every asked interpreter is read and reaped, by a load that
fails too, and once the answer is kept nothing more is asked."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.spec import places
from reconciler.spec.load import load_specs
from tests.host import Children

SPEC = ("apiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: snake}\n"
        "spec:\n  generations: 1\n  model: {provider: echo}\n")
PYTHONS = [program for program in places.SYSTEM_PYTHONS if os.path.exists(program)]


@pytest.fixture(autouse=True)
def _unasked() -> Iterator[None]:
    places.python_path_folders.cache_clear()
    yield
    places.python_path_folders()  # (read whatever a test left asked)


def test_the_answer_is_the_one_asked_first_and_every_asker_is_reaped(
        new_children: Children) -> None:
    assert PYTHONS, "this host has no system python3 to ask"
    places.ask_python_paths()
    asked = {program: process.pid for program, process in places._ASKED.items()
             if process is not None}
    assert set(asked) == set(PYTHONS) and set(asked.values()) <= new_children()
    found = places.python_path_folders()
    assert not places._ASKED and not new_children()
    places.python_path_folders.cache_clear()
    assert places.python_path_folders() == found  # asked afresh: the same folders


def test_a_load_that_fails_reads_and_reaps_what_it_asked(
        tmp_path: Path, new_children: Children) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: [\n", encoding="utf-8")
    with pytest.raises(SpecError):
        load_specs([broken], state_dir=tmp_path / "state")
    assert not places._ASKED and not new_children()
    assert places.python_path_folders.cache_info().currsize == 1  # answered all the same


def test_once_the_answer_is_kept_nothing_more_is_asked(
        tmp_path: Path, new_children: Children) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(SPEC, encoding="utf-8")
    load_specs([good], state_dir=tmp_path / "state")
    places.ask_python_paths()
    load_specs([good], state_dir=tmp_path / "state")
    assert not places._ASKED and not new_children()
