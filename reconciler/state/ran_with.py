"""Which kernel ran a generation, and which one its lineage was born under. Read-only.

A generation's observation records ``ran_with`` (docs/contract.md, "Pinned
kernels"): the kernel (commit, fingerprint, where it came from), the control
plane and the versions of what ran beside it; null (or absent) for generations
the original instrument or an older ouro wrote. A lineage's metadata names the
kernel it was born under (``instrument_commit``, ``instrument_fingerprint``):
the physics every generation of it must run. Through ouro the two never differ;
a generation whose recorded kernel differs was written by something else, which
is exactly what a reader wants to see.

Everything read here is text an organism, a provider or a foreign writer may
have written: it is taken only when it has the recorded type, cut to a bounded
length, and never trusted to be well-formed. Nothing here raises for a damaged
or hostile record: it reads as ``malformed`` (with why) or ``not-recorded``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reconciler.errors import StateError
from reconciler.kernel.base import formats
from reconciler.kernel.base.config import ENTRY_METADATA_KEY, METADATA_FILE, LineagePaths
from reconciler.state.repos import open_repo

__all__ = [
    "MALFORMED",
    "NOT_RECORDED",
    "RAN_WITH_KEY",
    "RECORDED",
    "BornUnder",
    "KernelRun",
    "born_under",
    "differs",
    "kernel_run",
]

RAN_WITH_KEY = "ran_with"  # the observation's key (kernel.generation writes it)
RECORDED, NOT_RECORDED, MALFORMED = "recorded", "not-recorded", "malformed"
MAX_TEXT = 200  # a recorded text beyond this many characters is cut (and says so)
MAX_VERSIONS = 32  # entries of ``versions`` shown; the rest are counted


def _text(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + f"… ({len(value)} chars)"


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class KernelRun:
    """An observation's ``ran_with``, as far as it could be read."""

    status: str  # recorded | not-recorded | malformed
    commit: str | None = None
    fingerprint: str | None = None
    source: str | None = None  # running | store | materialized (as recorded)
    package: str | None = None
    entry: str | None = None
    ouro_version: str | None = None
    ouro_commit: str | None = None
    versions: tuple[tuple[str, str | None], ...] = ()
    problem: str | None = None  # why it is malformed

    @property
    def recorded(self) -> bool:
        return self.status == RECORDED


def _versions(value: Any, problems: list[str]) -> tuple[tuple[str, str | None], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        problems.append(f"versions is {_kind(value)}, not an object")
        return ()
    found: list[tuple[str, str | None]] = []
    for key, version in list(value.items())[:MAX_VERSIONS]:
        if version is not None and not isinstance(version, str):
            problems.append(f"version of {_text(key)} is {_kind(version)}")
        found.append((_text(key) or "?", _text(version)))
    if len(value) > MAX_VERSIONS:
        problems.append(f"{len(value) - MAX_VERSIONS} more versions not shown")
    return tuple(found)


def kernel_run(record: Mapping[str, Any] | None) -> KernelRun:
    """The ``ran_with`` of an observation ``record`` (None: no observation)."""
    value = record.get(RAN_WITH_KEY) if record is not None else None
    if value is None:
        return KernelRun(NOT_RECORDED)
    if not isinstance(value, dict):
        return KernelRun(MALFORMED, problem=f"ran_with is {_kind(value)}, not an object")
    problems: list[str] = []
    kernel = value.get("kernel")
    control = value.get("control_plane")
    for name, part in (("kernel", kernel), ("control_plane", control)):
        if not isinstance(part, dict):
            problems.append(f"{name} is {_kind(part)}, not an object")
    kernel = kernel if isinstance(kernel, dict) else {}
    control = control if isinstance(control, dict) else {}
    commit, fingerprint = _text(kernel.get("commit")), _text(kernel.get("fingerprint"))
    if commit is None or fingerprint is None:
        problems.append("the kernel's commit or fingerprint is missing")
    run = KernelRun(
        RECORDED, commit=commit, fingerprint=fingerprint, source=_text(kernel.get("source")),
        package=_text(kernel.get("package")), entry=_text(kernel.get("entry")),
        ouro_version=_text(control.get("ouro_version")),
        ouro_commit=_text(control.get("ouro_commit")),
        versions=_versions(value.get("versions"), problems),
    )
    if problems:
        return replace(run, status=MALFORMED, problem="; ".join(problems))
    return run


@dataclass(frozen=True)
class BornUnder:
    """The kernel a lineage was born under, from its metadata (None where not recorded)."""

    commit: str | None
    fingerprint: str | None
    entry: str | None  # the entry point's request schema (None: no ouro entry point)
    repository: str | None
    source: str  # where it was read: the lineage's metadata file, or the observations'


def born_under(paths: LineagePaths) -> BornUnder | None:
    """The lineage's recorded kernel: its branch head's metadata file, else the observation
    repository's metadata (the kernel keeps the two identical). None when neither reads."""
    places = ((paths.git_dir, True, paths.branch, METADATA_FILE),
              (paths.observations, False, paths.observation_branch,
               formats.OBSERVATION_METADATA_FILE))
    for place, bare, branch, name in places:
        metadata = _metadata(place, bare, branch, name)
        if metadata is not None:
            return BornUnder(
                commit=_text(metadata.get("instrument_commit")),
                fingerprint=_text(metadata.get("instrument_fingerprint")),
                entry=_text(metadata.get(ENTRY_METADATA_KEY)),
                repository=_text(metadata.get("instrument_repository")), source=name)
    return None


def _metadata(place: Path, bare: bool, branch: str, name: str) -> dict[str, Any] | None:
    repo = open_repo(place, bare=bare)
    try:
        head = repo.head(branch) if repo is not None else None
        found = repo.json_or_none(head.tree, name) if repo and head else None
    except StateError:
        return None
    return found if isinstance(found, dict) else None


def differs(born: BornUnder | None, commit: str | None, fingerprint: str | None) -> str | None:
    """How a generation's recorded kernel differs from the one its lineage was born under
    (None when it does not, or when either is not recorded: nothing is certain then)."""
    if born is None or born.fingerprint is None or fingerprint is None:
        return None
    if fingerprint != born.fingerprint:
        return "fingerprint"
    if born.commit is not None and commit is not None and commit != born.commit:
        return "commit"
    return None
