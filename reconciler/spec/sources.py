"""The spec files a run names, read as hostile input: which files, and their text.

A folder stands for every ``*.yaml``/``*.yml`` file below it (sorted; hidden names
skipped). A file is read within ``MAX_FILE_BYTES`` (``reconciler.spec.files``) and
must be UTF-8. What goes wrong is a problem at ``FILE:LINE:COL``, never an
exception. A ``Document`` is one validated document of a source (the loader's
unit from here on).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml.nodes import Node

from reconciler.errors import Problem
from reconciler.spec import sets
from reconciler.spec.files import FileRefused, read_limited
from reconciler.spec.models import LineageSpec
from reconciler.spec.positions import problem

__all__ = ["MAX_FILE_BYTES", "SPEC_SUFFIXES", "Document", "Source", "collect", "read_text"]

SPEC_SUFFIXES = (".yaml", ".yml")
MAX_FILE_BYTES = 1 << 20  # a spec is a page of YAML; beyond this it is a mistake


@dataclass(frozen=True)
class Source:
    """A spec file: as the user named it (what problems print) and absolute."""

    shown: str
    path: Path


@dataclass
class Document:
    """One validated spec document (a set stands for one per member)."""

    source: Source
    index: int
    node: Node
    spec: LineageSpec
    set_name: str | None = None
    member: sets.Membership | None = None

    def member_of(self) -> str:
        """How a problem of a set's member begins: the member and its set ('' for a Lineage)."""
        if self.set_name is None:
            return ""
        return f"member {self.spec.name} of set {self.set_name}: "


def collect(paths: Sequence[Path], problems: list[Problem]) -> list[Source]:
    """Files named, and every *.yaml/*.yml below folders named (sorted; hidden names skipped)."""
    sources: list[Source] = []
    seen: set[str] = set()

    def add(shown: Path) -> None:
        absolute = Path(os.path.abspath(shown))
        key = os.path.realpath(absolute)
        if key not in seen:
            seen.add(key)
            sources.append(Source(str(shown), absolute))

    for given in paths:
        given = Path(given)
        try:
            if given.is_dir():
                found: list[Path] = []
                for root, dirs, files in os.walk(given, followlinks=False):
                    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                    found.extend(
                        Path(root) / name
                        for name in files
                        if name.endswith(SPEC_SUFFIXES)
                        and not name.startswith(".")
                        and (Path(root) / name).is_file()
                    )
                if not found:
                    problems.append(problem(str(given), 1, 1, "",
                                            "no *.yaml or *.yml spec files in this folder"))
                for path in sorted(found):
                    add(path)
            elif given.exists():
                add(given)
            else:
                problems.append(problem(str(given), 1, 1, "", "no such file or folder"))
        except (OSError, ValueError) as error:
            problems.append(problem(str(given), 1, 1, "", f"cannot read: {error}"))
    return sources


def read_text(source: Source, problems: list[Problem]) -> str | None:
    """The file's text (a BOM dropped), or None with the problem added."""
    try:
        data = read_limited(source.path, MAX_FILE_BYTES, "a spec file")
    except FileRefused as error:
        problems.append(problem(source.shown, 1, 1, "", str(error)))
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        problems.append(problem(
            source.shown, line, column, "",
            f"not UTF-8 text: byte 0x{data[error.start]:02x} cannot be decoded "
            "(specs are UTF-8)",
        ))
        return None
    return text.removeprefix("\ufeff")
