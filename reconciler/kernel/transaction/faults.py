"""Host faults met by a generation, named: a full disk, a damaged repository.

Trusted harness. Rule: a generation never ends in a bare ``OSError`` or
``pygit2.GitError``. A full filesystem says "no space left on device" and which of
the lineage's places is on it (libgit2 does not always say so itself: a loose object
that could not be written is later reported as "object not found"); an object git
cannot read is a ``DamageError`` (a refusal naming the repair); any other I/O error
names its file. Recovery has already settled the attempt when these are raised.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pygit2

from ..base.config import LineagePaths
from ..base.errors import DamageError, KernelError, StorageError

__all__ = ["full_places", "names_an_object", "translate"]

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = ("no space left on device", "disk quota exceeded")
LOW_SPACE_BYTES = 1 << 20  # a place with less free than this is taken to be full


_OBJECT_ID = re.compile(r"\A'?(?:[0-9a-f]{40}|[0-9a-f]{64})'?\Z")


def names_an_object(exc: KeyError) -> bool:
    """pygit2 raises KeyError(<object id>) for an object its repository does not have."""
    return bool(_OBJECT_ID.match(str(exc)))


def _places(paths: LineagePaths, extra: tuple[Path, ...]) -> list[tuple[str, Path]]:
    return [
        ("the lineage git dir", Path(paths.git_dir)),
        ("the observation repository", Path(paths.observations)),
        ("the lineage worktree", Path(paths.worktree)),
        *(("the kernel's temporary folder", place) for place in extra),
    ]


def full_places(paths: LineagePaths, extra: tuple[Path, ...] = ()) -> list[str]:
    """The lineage's places whose filesystem has (almost) no space or inodes left."""
    full = []
    for label, place in _places(paths, extra):
        try:
            info = os.statvfs(place)
        except OSError:
            continue
        no_bytes = info.f_bavail * info.f_frsize < LOW_SPACE_BYTES
        no_inodes = info.f_files > 0 and info.f_favail == 0
        if no_bytes or no_inodes:
            full.append(f"{label} {place}")
    return full


def _no_space(paths: LineagePaths, where: str, extra: tuple[Path, ...]) -> StorageError:
    full = full_places(paths, extra)
    on = "; full: " + ", ".join(full) if full else ""
    return StorageError(
        f"kernel: no space left on device while {where}{on}: nothing of this generation was "
        "published (it re-runs); free space there, then run apply again"
    )


def translate(
    exc: OSError | pygit2.GitError, paths: LineagePaths, extra: tuple[Path, ...] = ()
) -> KernelError:
    """The named kernel error for a host fault met during a generation of ``paths``."""
    text = str(exc)
    if isinstance(exc, OSError) and not isinstance(exc, pygit2.GitError):
        where = f"writing {exc.filename}" if exc.filename else "writing the lineage's places"
        # libgit2's OSError ("failed to write out file: No space left on device") has
        # no errno; its text is all it says
        if exc.errno in _FULL_ERRNOS or any(m in text.lower() for m in _FULL_TEXT):
            return _no_space(paths, where, extra)
        return StorageError(
            f"kernel: {exc.strerror or text} ({exc.filename or 'a lineage place'}) during a "
            f"generation of {paths.branch}: nothing was published; fix the host, then run "
            "apply again"
        )
    if any(marker in text.lower() for marker in _FULL_TEXT) or full_places(paths, extra):
        return _no_space(paths, f"git wrote to the repositories ({text})", extra)
    return DamageError(
        f"kernel: git cannot read or write the repositories of {paths.branch} ({text}): an "
        f"object may be missing or corrupt; run `ouro verify` and `git fsck` in "
        f"{paths.git_dir} and {paths.observations}, restore what they name from a clone or a "
        "backup, then run apply again",
        reason="repository-damaged",
    )
