"""ouro's errors: every foreign error is translated here, at the boundary.

    OuroError                   anything ouro reports instead of a traceback
    ├── SpecError               one or more problems in spec files (each FILE:LINE:COL)
    ├── InstrumentError         this ouro cannot tell which instrument it is
    ├── StateError              a lineage's repositories cannot be read as a lineage
    │   └── Unreproducible      a record that cannot be run again (a reason code and why)
    ├── PlanFileError           a saved plan is unreadable or stale
    ├── LockError               another apply holds a lineage
    ├── KernelStoreError        the kernel store cannot be read or written, or an entry is damaged
    ├── ApplyError              apply refused or failed as a whole
    ├── PathRefused             a place ouro writes is a link or no regular file, or is shared
    └── HostFault               the host failed an output: a full disk, a quota, a closed pipe

Kernel errors (``reconciler.kernel.base.errors``) stay the kernel's own; the
reconciler catches them at its edge and reports them with their reason.
A permanent error (retrying is useless) is never a ``TransientError``.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass


class OuroError(Exception):
    """Base of ouro's own errors; the CLI prints them and exits 1."""


@dataclass(frozen=True)
class Problem:
    """One problem at one place of one spec file."""

    file: str
    line: int
    column: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        if self.field:
            return f"{where}: {self.field}: {self.message}"
        return f"{where}: {self.message}"


class SpecError(OuroError):
    """Specs must be valid as a whole before anything is planned."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class InstrumentError(OuroError):
    """ouro must know its own commit and fingerprint before it plans or applies."""


class StateError(OuroError):
    """A lineage's places could not be read."""


class Unreproducible(StateError):
    """A lineage is reproduced only from a record that holds everything it received, under
    a kernel ouro can run again (``reason``: the refusal's code, docs/reproduce.md)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PlanFileError(OuroError):
    """A saved plan is applied only while every head it saw is still where it was."""


class LockError(OuroError):
    """One apply per lineage at a time."""


class KernelStoreError(OuroError):
    """A stored kernel is run only when its files are exactly its fingerprint; the store
    must be writable before a kernel births or extends a lineage."""


class ApplyError(OuroError):
    """apply refused or failed as a whole."""


class PathRefused(OuroError):
    """ouro writes only regular files it reaches without a link, in folders no one else
    can write (``reconciler.ownfiles``)."""


class HostFault(OuroError):
    """A full disk, an exhausted quota or a closed pipe is the host's, never a bug in ouro:
    it is named, with its remedy, and the command exits 1."""


_HOST_REMEDIES = {
    errno.ENOSPC: ("no space left on device", "free space there (or write elsewhere), then "
                   "run it again"),
    errno.EDQUOT: ("disk quota exceeded", "free space or raise the quota, then run it again"),
    errno.EPIPE: ("the reader of the output went away (closed pipe)", "keep the reader "
                  "open until ouro ends (e.g. not `| head`), or write to a file"),
}


_FULL_WORDS = {"no space left on device": errno.ENOSPC, "disk quota exceeded": errno.EDQUOT}


def with_host_remedy(message: str) -> str:
    """``message`` (a kernel's or libgit2's, reported as is) that names a full disk or an
    exhausted quota without a remedy, with the remedy (``_HOST_REMEDIES``); any other
    message unchanged. Every full-disk message ouro shows names what to do."""
    lowered = message.lower()
    found = next((code for words, code in _FULL_WORDS.items() if words in lowered), None)
    if found is None or "free space" in lowered:
        return message
    return f"{message.rstrip()}: {_HOST_REMEDIES[found][1]}"


def host_fault(error: BaseException, doing: str = "writing its output") -> HostFault | None:
    """The named host fault an ``OSError`` is (full disk, quota, closed pipe), or None."""
    if not isinstance(error, OSError) or error.errno not in _HOST_REMEDIES:
        return None
    what, remedy = _HOST_REMEDIES[error.errno]
    where = f" ({error.filename})" if error.filename else ""
    return HostFault(f"ouro: host fault while {doing}{where}: {what}: {remedy}")
