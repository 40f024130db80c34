"""This instrument's identity: the commit ouro runs from, and its physics fingerprint.

The commit comes from, in order: ``OURO_INSTRUMENT_COMMIT``; the commit
recorded at build time in ``_build_commit.txt`` (installed wheels); the HEAD of
the git checkout this package lives in, refused when the kernel's files differ
from that commit (uncommitted physics have no commit to name).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pygit2

from reconciler.errors import InstrumentError
from reconciler.kernel.base import identity as kernel_identity
from reconciler.kernel.base.config import Identity

PACKAGE_DIR = Path(__file__).resolve().parent
BUILD_COMMIT_FILE = PACKAGE_DIR / "_build_commit.txt"
DEFAULT_REPOSITORY = "https://example.invalid/ouro.git"


def _checkout() -> pygit2.Repository | None:
    found = pygit2.discover_repository(str(PACKAGE_DIR))
    return pygit2.Repository(found) if found else None


def _commit_from_checkout() -> str:
    repo = _checkout()
    if repo is None or repo.head_is_unborn:
        raise InstrumentError(
            "ouro: cannot tell this instrument's commit (not a git checkout, no build "
            "record): set OURO_INSTRUMENT_COMMIT to the full commit id ouro was built from"
        )
    workdir = Path(repo.workdir or ".").resolve()
    kernel_rel = kernel_identity.KERNEL_DIR.relative_to(workdir).as_posix()
    dirty = sorted(
        path
        for path, flags in repo.status().items()
        if path.startswith(kernel_rel + "/")
        and flags not in (pygit2.GIT_STATUS_CURRENT, pygit2.GIT_STATUS_IGNORED)
        and not path.endswith(".pyc")
    )
    if dirty:
        raise InstrumentError(
            "ouro: the kernel has uncommitted changes ("
            + ", ".join(dirty[:5])
            + "): physics without a commit cannot run a generation; commit them, or set "
            "OURO_INSTRUMENT_COMMIT for a test"
        )
    return str(repo.head.target)


def _ref_and_repository() -> tuple[str, str]:
    ref = os.environ.get("OURO_INSTRUMENT_REF")
    repository = os.environ.get("OURO_INSTRUMENT_REPOSITORY")
    if ref is None or repository is None:
        repo = _checkout()
        if repo is not None:
            if ref is None and not repo.head_is_unborn and not repo.head_is_detached:
                ref = repo.head.shorthand
            if repository is None and "origin" in [r.name for r in repo.remotes]:
                repository = repo.remotes["origin"].url
    return ref or "unknown", repository or DEFAULT_REPOSITORY


def commit() -> str:
    override = os.environ.get("OURO_INSTRUMENT_COMMIT")
    if override is not None:
        value = override.strip().lower()
        if not kernel_identity.is_object_id(value):
            raise InstrumentError(
                f"ouro: OURO_INSTRUMENT_COMMIT={override!r} is not a full 40- or 64-hex "
                "git commit id"
            )
        return value
    if BUILD_COMMIT_FILE.is_file():
        value = BUILD_COMMIT_FILE.read_text(encoding="ascii").strip()
        if kernel_identity.is_object_id(value):
            return value
    return _commit_from_checkout()


@cache
def _fingerprint() -> str:
    return kernel_identity.fingerprint()


def fingerprint() -> str:
    """The fingerprint of the kernel this ouro runs (computed once per process)."""
    return _fingerprint()


def current() -> Identity:
    """This instrument, as a lineage born now would record it."""
    ref, repository = _ref_and_repository()
    return Identity(repository=repository, ref=ref, commit=commit(), fingerprint=_fingerprint())
