"""The spec files a run names, read as hostile input: which files, and their text.

A folder stands for every ``*.yaml``/``*.yml`` file below it (sorted; hidden names
skipped). No symbolic link is followed: a link named, or found in a folder (to a
file or a folder), is refused by name, and a file is opened with ``O_NOFOLLOW``
(a spec repository's commit could otherwise point a spec at any file the reader
may read, and have it quoted back). A file is read within ``MAX_FILE_BYTES``
(``reconciler.spec.files``) and must be UTF-8. What goes wrong is a problem at
``FILE:LINE:COL``, never an exception. A ``Document`` is one validated document
of a source (the loader's unit from here on).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml.nodes import Node

from reconciler.errors import Problem
from reconciler.spec import sets
from reconciler.spec.files import FileRefused, read_limited
from reconciler.spec.links import link_problem
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


def _walk(given: Path, problems: list[Problem]) -> list[Path]:
    """The spec files below folder ``given``; a link found there is refused by name (a
    linked folder is not entered, a linked file not read) and hidden names are skipped."""
    found: list[Path] = []
    for root, dirs, files in os.walk(given, followlinks=False):
        for name in sorted(dirs):
            folder = Path(root) / name
            if name.startswith("."):
                dirs.remove(name)
            elif folder.is_symlink():
                problems.append(problem(str(folder), 1, 1, "",
                                        link_problem(str(folder), "folder")))
                dirs.remove(name)
        dirs.sort()
        for name in files:
            path = Path(root) / name
            if not name.endswith(SPEC_SUFFIXES) or name.startswith("."):
                continue
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                problems.append(problem(str(path), 1, 1, "", link_problem(str(path), "file")))
            elif stat.S_ISREG(info.st_mode):
                found.append(path)
    return found


def collect(paths: Sequence[Path], problems: list[Problem]) -> list[Source]:
    """Files named, and every *.yaml/*.yml below folders named (sorted; hidden names
    skipped); a link, named or found, is refused by name and never followed."""
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
            info = os.lstat(given)
            if stat.S_ISLNK(info.st_mode):
                kind = "folder" if given.is_dir() else "file"
                problems.append(problem(str(given), 1, 1, "", link_problem(str(given), kind)))
            elif stat.S_ISDIR(info.st_mode):
                found = _walk(given, problems)
                if not found:
                    problems.append(problem(str(given), 1, 1, "",
                                            "no *.yaml or *.yml spec files in this folder"))
                for path in sorted(found):
                    add(path)
            else:
                add(given)
        except FileNotFoundError:
            problems.append(problem(str(given), 1, 1, "", "no such file or folder"))
        except (OSError, ValueError) as error:
            why = error.strerror if isinstance(error, OSError) and error.strerror else error
            problems.append(problem(str(given), 1, 1, "", f"cannot read: {why}"))
    return sources


def read_text(source: Source, problems: list[Problem]) -> str | None:
    """The file's text (a BOM dropped), or None with the problem added."""
    try:  # O_NOFOLLOW: a file replaced by a link since it was listed is not followed
        data = read_limited(source.path, MAX_FILE_BYTES, "a spec file", follow=False)
    except FileRefused as error:
        linked = source.path.is_symlink()
        problems.append(problem(source.shown, 1, 1, "",
                                link_problem(source.shown, "file") if linked else str(error)))
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        problems.append(problem(  # the byte itself is not shown: it may be a secret's
            source.shown, line, column, "",
            "not UTF-8 text: a byte here cannot be decoded (specs are UTF-8)",
        ))
        return None
    return text.removeprefix("\ufeff")
