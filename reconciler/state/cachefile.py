"""A derived, deletable cache file (summaries, verdict records) and the secret that seals it.

Rule: a cache is believed only when it carries a MAC (HMAC-SHA256) made with its state
dir's secret, ``<state dir>/.cache-key`` (``KEY_FILE``): 32 random bytes, made on first
use with ``O_EXCL`` and mode 0600, kept outside the cache folders. A record without the
MAC, or whose MAC does not check, is ignored and rebuilt (a state dir from before the
MAC: every cache is rebuilt once). What this protects against: a party who can write a
cache file but not read the secret (a cache folder copied from elsewhere, a forged
record dropped in by another account through a backup or a share) cannot make ``log``,
``export``, ``status``, the viewer or ``verify`` believe it. What it does not: anyone
who can read the secret (the same user, root) can seal a forgery; the repositories stay
the state, and ``ouro verify --full`` reads them without any record.

A cache is written atomically (``reconciler.ownfiles.write_atomic``: no link followed,
nothing but a regular file replaced) in a folder made 0700 (a cache folder that is a link
is replaced by one, its target untouched: nothing is written through it), and read back
only by ``reconciler.ownfiles.read_regular`` (no link, a regular file, a bounded size;
anything else is absent and rebuilt), and simply not written when
it cannot be: a cache that is missing costs a rebuild, never a failure. A state dir or
cache folder others can write, or a key file that is not a private regular file, is
refused (``PathRefused``) naming the fix.

A command that reads a whole fleet's caches in one pass reads the seal once for it
(``one_seal``): the folders are checked and the key read when the pass begins, not once
per lineage (ten system calls each, a tenth of a 1,000-lineage plan's own reading).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.errors import PathRefused
from reconciler.ownfiles import check_private, open_regular, private_folder, write_atomic

if TYPE_CHECKING:
    from reconciler.kernel.base.config import LineagePaths

__all__ = ["CACHE_DIR", "KEY_FILE", "MAC_FIELD", "CacheSeal", "cache_key", "cache_seal",
           "canonical", "one_seal", "write_cache"]

CACHE_DIR = ".summaries"  # <state dir>/CACHE_DIR: the summaries' and observations' records
KEY_FILE = ".cache-key"
KEY_BYTES = 32
MAC_FIELD = "mac"


def cache_key(paths: LineagePaths) -> str:
    """Names a lineage's cache files (every cache's): its places and branches, digested."""
    identity = "\0".join(
        (os.path.abspath(paths.git_dir), paths.branch,
         os.path.abspath(paths.observations), paths.observation_branch)
    )
    return hashlib.sha256(identity.encode("utf-8", errors="surrogateescape")).hexdigest()[:32]


def canonical(body: Mapping[str, Any]) -> bytes:
    """The one byte form a header is digested and sealed in."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True
                      ).encode("ascii")


class CacheSeal:
    """The MAC of one state dir's caches."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def mac(self, header: Mapping[str, Any]) -> str:
        """The MAC of a header (every field but the MAC itself)."""
        body = {name: value for name, value in header.items() if name != MAC_FIELD}
        return hmac.digest(self._key, canonical(body), "sha256").hex()  # (one call: C)

    def sealed(self, header: dict[str, Any]) -> dict[str, Any]:
        return {**header, MAC_FIELD: self.mac(header)}

    def opens(self, header: Mapping[str, Any]) -> bool:
        """Does the header carry this state dir's MAC over all its other fields?"""
        claimed = header.get(MAC_FIELD)
        return isinstance(claimed, str) and hmac.compare_digest(claimed, self.mac(header))


def _read_key(path: Path) -> bytes:
    fd = open_regular(path, os.O_RDONLY, what="the cache key")
    try:
        info = os.fstat(fd)
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if info.st_uid not in (os.geteuid(), 0) or info.st_mode & 0o077 or len(data) != KEY_BYTES:
        raise PathRefused(
            f"ouro: the cache key {path} is not a private {KEY_BYTES}-byte file of this user "
            f"(mode {stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid}, {len(data)} bytes): "
            "remove it; ouro makes a new one and rebuilds its caches")
    return data


def _make_key(state: Path) -> None:
    """A new key, whole at its name or not there: written to a temporary file made with
    O_EXCL, then linked to its name (which fails if another process made one first)."""
    private_folder(state, "the state dir")
    temp = state / f".{KEY_FILE}.{os.getpid()}.{os.urandom(6).hex()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(os.urandom(KEY_BYTES))
        with contextlib.suppress(FileExistsError):  # another process made it first: use it
            os.link(temp, state / KEY_FILE, follow_symlinks=False)
    finally:
        temp.unlink(missing_ok=True)


# The seal ``one_seal`` holds for the pass under way: its cache folder and the seal (None
# while the state dir has no key yet).
_HELD: contextvars.ContextVar[tuple[Path, CacheSeal | None] | None] = contextvars.ContextVar(
    "ouro_cache_seal", default=None)


@contextlib.contextmanager
def one_seal(cache_dir: Path | None) -> Iterator[None]:
    """Within the block, ``cache_seal(cache_dir)`` checks the folders and reads the key
    once (a key made inside the block is kept too); other folders are read as ever."""
    if cache_dir is None:
        yield
        return
    token = _HELD.set((cache_dir, _read_seal(cache_dir, create=False)))
    try:
        yield
    finally:
        _HELD.reset(token)


def cache_seal(cache_dir: Path, *, create: bool) -> CacheSeal | None:
    """The seal of the caches in ``cache_dir`` (keyed by its parent, the state dir's,
    secret); None when there is no key yet and ``create`` is false, or when one cannot be
    made. Refuses (``PathRefused``) a shared state dir or cache folder, or a bad key.
    Inside ``one_seal(cache_dir)``, the one it read."""
    held = _HELD.get()
    if held is None or held[0] != cache_dir:
        return _read_seal(cache_dir, create=create)
    if held[1] is None and create:
        found = _read_seal(cache_dir, create=True)
        _HELD.set((cache_dir, found))
        return found
    return held[1]


def _read_seal(cache_dir: Path, *, create: bool) -> CacheSeal | None:
    state = cache_dir.parent
    check_private(state, "the state dir")
    check_private(cache_dir, "the cache folder", own=True)
    try:
        return CacheSeal(_read_key(state / KEY_FILE))
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    try:
        _make_key(state)
        return CacheSeal(_read_key(state / KEY_FILE))
    except OSError:
        return None


def _drop_planted(target: Path) -> None:
    """A link, FIFO or device at a cache's name (never ouro's: it writes regular files) is
    removed, itself, not what it names: the cache is rebuilt in its place."""
    parent = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.stat(target.name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
            os.unlink(target.name, dir_fd=parent)
    except FileNotFoundError:
        pass
    finally:
        os.close(parent)


def write_cache(target: Path, data: bytes) -> bool:
    """Write ``data`` to ``target``; False (nothing left behind) when it cannot be written."""
    try:
        private_folder(target.parent, "the cache folder", replace_link=True)
        _drop_planted(target)
        write_atomic(target, data, what="the cache file", own_folder=True)
    except (OSError, PathRefused):
        return False
    return True
