"""The host Python's path is asked of each system python3 while the specs are parsed
(``places.ask_python_paths``): every asked interpreter is read and reaped, by a load that
fails too, and once the answer is kept nothing more is asked. An interpreter that cannot
run, answers nonsense or never answers adds no folder, and is reaped all the same."""

from __future__ import annotations

import os
import time
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
    for program in list(places._ASKED):  # whatever a test left asked: reaped
        asked = places._ASKED.pop(program)
        if asked is not None:
            asked.kill()
            asked.wait()
    places.python_path_folders.cache_clear()  # (the next caller asks the real interpreters)


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


def _interpreter(folder: Path, body: str, mode: int = 0o755) -> str:
    """A stand-in for a system python3: a shell script (it ignores ``-c PROGRAM``)."""
    program = folder / "python3"
    program.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    program.chmod(mode)
    return str(program)


@pytest.mark.parametrize(("body", "mode", "found"), [
    ("echo 'not json'\n", 0o755, []),
    ("echo '{\"path\": 1}'\n", 0o755, []),
    ("echo '[\"/from/it\", 1, null]'\n", 0o755, ["/from/it"]),
    ("exit 3\n", 0o755, []),
    ("echo '[\"/never\"]'\n", 0o644, []),  # cannot be run at all
], ids=["not-json", "not-a-list", "not-strings", "no-answer", "not-runnable"])
def test_an_answer_that_is_no_list_of_folders_adds_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_children: Children,
        body: str, mode: int, found: list[str]) -> None:
    program = _interpreter(tmp_path, body, mode)
    monkeypatch.setattr(places, "SYSTEM_PYTHONS", (program,))
    assert places._python_path(program) == found
    assert not places._ASKED and not new_children()


def test_an_interpreter_that_never_answers_is_killed_and_reaped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_children: Children) -> None:
    program = _interpreter(tmp_path, "exec sleep 60\n")
    monkeypatch.setattr(places, "SYSTEM_PYTHONS", (program,))
    monkeypatch.setattr(places, "_ASK_SECONDS", 0.5)
    started = time.monotonic()
    assert places._python_path(program) == []
    assert time.monotonic() - started < 10
    assert not places._ASKED and not new_children()
