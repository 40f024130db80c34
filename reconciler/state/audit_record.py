"""The last clean verdict of each lineage's audit, so that the next audit reads only what is new.

Rule: a record is written only after an audit found a lineage consistent, and it
says exactly that: both histories are consistent up to two heads and every
object reachable from them read whole. It lives in ``<state dir>/.audits/``
(``RECORD_DIR``), outside the lineage's three places; it is a cache, not state:
deleting it costs one full audit and loses nothing.

A record is used (the audit resumes from it, ``audit.Resume``) only when all of
these hold, else the audit reads everything again:

- it carries the MAC of the state dir's secret (``reconciler.state.cachefile``): a
  record anyone who can write ``.audits`` could have made vouches for nothing;
- its schema, key (the lineage's places and branches) and both digests check
  (a damaged or truncated record is ignored);
- it was written by this very audit (``audit_version``: the digest of the code
  whose rules it applied), so an upgrade that adds a check re-checks everything;
- every loose object file either repository had when it was written is still
  there (``Snapshot``); one whose size, inode, mtime or ctime changed since is
  read again (git and libgit2 touch an object they are asked to write again),
  and one that is gone or no longer reads whole makes the history suspect;
- the packs are exactly those it saw, and neither repository borrows objects
  (``objects/info/alternates``: their files are not ours to watch);
- today's histories continue its heads (``audit`` checks this, and starts over).

What a resumed audit cannot see is damage that leaves a file's size, inode and
times alone (a disk's bit rot under the filesystem): ``ouro verify --full``
ignores the record and reads every object.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.kernel.base import formats, totals
from reconciler.kernel.base.config import LineagePaths
from reconciler.kernel.base.identity import OBJECT_ID
from reconciler.kernel.transaction import publish
from reconciler.ownfiles import read_regular
from reconciler.state import audit, audit_objects
from reconciler.state.audit import LineageAudit, Resume, audit_lineage
from reconciler.state.audit_objects import ObjectStore
from reconciler.state.cachefile import (
    MAC_FIELD,
    CacheSeal,
    cache_key,
    cache_seal,
    canonical,
    write_cache,
)
from reconciler.state.repos import READ_ERRORS, open_repo

__all__ = ["RECORD_DIR", "SCHEMA", "Snapshot", "audit_recorded", "audit_version", "load",
           "record_file", "snapshot"]

RECORD_DIR = ".audits"
SCHEMA = "ouro-audit-record/v1"
MAX_RECORD_BYTES = 256 << 20
_STAT = struct.Struct("<qqqq")  # size, inode, mtime_ns, ctime_ns
_HEX = frozenset("0123456789abcdef")
_version: str | None = None


def audit_version() -> str:
    """The digest of the code whose rules a record vouches for: the audit, its integrity
    pass and the kernel rules it applies (running totals included, physics release 4)."""
    global _version
    if _version is None:
        digest = hashlib.sha256()
        for module in (audit, audit_objects, formats, publish, totals):
            digest.update(Path(str(module.__file__)).read_bytes())
        _version = digest.hexdigest()
    return _version


# ---------------------------------------------------------------- what is on disk


@dataclass(frozen=True)
class Objects:
    """One repository's object store: every loose file's identity, and the packs'."""

    width: int  # bytes of an object id: 20 (SHA-1) or 32 (SHA-256)
    loose: dict[bytes, tuple[int, int, int, int]]
    packs: str  # digest of the pack files' names and identities

    def covers(self, earlier: Objects) -> bool:
        """Every object file ``earlier`` saw is here, untouched, and the packs are the same."""
        return self.changed(earlier) == []

    def changed(self, earlier: Objects) -> list[bytes] | None:
        """The object files ``earlier`` saw that were touched since; None if one is gone
        or the packs (or the id width) are not the same."""
        if self.packs != earlier.packs or self.width != earlier.width:
            return None
        loose = self.loose
        touched = [oid for oid, identity in earlier.loose.items() if loose.get(oid) != identity]
        return None if any(oid not in loose for oid in touched) else touched


@dataclass(frozen=True)
class Snapshot:
    lineage: Objects
    observations: Objects

    def covers(self, earlier: Snapshot) -> bool:
        return (self.lineage.covers(earlier.lineage)
                and self.observations.covers(earlier.observations))

    def vouches(self, earlier: Snapshot, paths: LineagePaths) -> bool:
        """Does what ``earlier`` saw still hold? Touched object files are read again."""
        for place, now, before in ((paths.git_dir, self.lineage, earlier.lineage),
                                   (paths.observations, self.observations, earlier.observations)):
            touched = now.changed(before)
            if touched is None:
                return False
            if touched and not _all_read(place, touched):
                return False
        return True


def _all_read(place: Path, oids: list[bytes]) -> bool:
    """Each object inflates whole and its content hashes to its id (``ObjectStore``)."""
    repo = open_repo(place)
    if repo is None:
        return False
    store = ObjectStore(repo.raw)
    return all(store.load(oid) is not None for oid in oids)


def _identity(status: os.stat_result) -> tuple[int, int, int, int]:
    return (status.st_size, status.st_ino, status.st_mtime_ns, status.st_ctime_ns)


def _objects(place: Path) -> Objects | None:
    """None when the store cannot be watched (unreadable, or it borrows objects)."""
    repo = open_repo(place)
    if repo is None:
        return None
    try:
        objects = Path(repo.raw.path) / "objects"
        if (objects / "info" / "alternates").exists():
            return None
        loose: dict[bytes, tuple[int, int, int, int]] = {}
        width = 0
        packs = hashlib.sha256()
        with os.scandir(objects) as folders:
            for folder in folders:
                name = folder.name
                if name == "pack":
                    for pack in sorted(os.scandir(folder.path), key=lambda e: e.name):
                        packs.update(f"{pack.name}:{_identity(pack.stat())}\n".encode())
                    continue
                if len(name) != 2 or not _HEX.issuperset(name) or not folder.is_dir():
                    continue
                with os.scandir(folder.path) as files:
                    for entry in files:
                        rest = entry.name
                        if len(rest) not in (38, 62) or not _HEX.issuperset(rest):
                            continue  # a temporary file, not an object
                        status = entry.stat(follow_symlinks=False)
                        if not stat.S_ISREG(status.st_mode):
                            return None
                        oid = bytes.fromhex(name + rest)
                        width = width or len(oid)
                        if len(oid) != width:
                            return None
                        loose[oid] = _identity(status)
        return Objects(width or 20, loose, packs.hexdigest())
    except READ_ERRORS:
        return None


def snapshot(paths: LineagePaths) -> Snapshot | None:
    lineage, observations = _objects(paths.git_dir), _objects(paths.observations)
    if lineage is None or observations is None:
        return None
    return Snapshot(lineage, observations)


# ---------------------------------------------------------------- the record file


def record_file(record_dir: Path, paths: LineagePaths) -> Path:
    return record_dir / f"{(paths.name or 'lineage')[:40]}-{cache_key(paths)}.audit"


@dataclass(frozen=True)
class Record:
    resume: Resume
    snapshot: Snapshot


def _digest(header: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(header)).hexdigest()


def _body(objects: Objects) -> bytes:
    return b"".join(oid + _STAT.pack(*identity) for oid, identity in sorted(objects.loose.items()))


def _encode(paths: LineagePaths, resume: Resume, taken: Snapshot, seal: CacheSeal) -> bytes:
    bodies = [_body(taken.lineage), _body(taken.observations)]
    header: dict[str, Any] = {
        "schema": SCHEMA,
        "key": cache_key(paths),
        "audit_version": audit_version(),
        "lineage_head": resume.lineage_head,
        "lineage_commits": resume.lineage_commits,
        "generations": resume.generations,
        "observation_head": resume.observation_head,
        "observation_commits": resume.observation_commits,
        "stores": [{"width": objects.width, "loose": len(objects.loose), "packs": objects.packs}
                   for objects in (taken.lineage, taken.observations)],
        "body_sha256": hashlib.sha256(b"".join(bodies)).hexdigest(),
    }
    header["sha256"] = _digest(header)
    line = json.dumps(seal.sealed(header), separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return line + b"\n" + b"".join(bodies)


def _decode_store(store: Any, body: memoryview) -> tuple[Objects, int]:
    width, count, packs = store["width"], store["loose"], store["packs"]
    if width not in (20, 32) or not isinstance(count, int) or not isinstance(packs, str):
        raise ValueError("store")
    size = count * (width + _STAT.size)
    if size > len(body):
        raise ValueError("short body")
    loose = {}
    step = width + _STAT.size
    for start in range(0, size, step):
        loose[bytes(body[start:start + width])] = _STAT.unpack_from(body, start + width)
    return Objects(width, loose, packs), size


def _decode(data: bytes, paths: LineagePaths, seal: CacheSeal) -> Record | None:
    line, newline, rest = data.partition(b"\n")
    header = json.loads(line.decode("ascii"))
    if not newline or not isinstance(header, dict) or header.get("schema") != SCHEMA:
        return None
    if not seal.opens(header):
        return None
    del header[MAC_FIELD]
    claimed = header.pop("sha256", None)
    if claimed != _digest(header) or header.get("key") != cache_key(paths):
        return None
    if (header.get("audit_version") != audit_version()
            or header.get("body_sha256") != hashlib.sha256(rest).hexdigest()):
        return None
    resume = Resume(*(header[key] for key in (
        "lineage_head", "lineage_commits", "generations", "observation_head",
        "observation_commits")))
    if not (all(isinstance(v, str) and OBJECT_ID.match(v)
                for v in (resume.lineage_head, resume.observation_head))
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (
                resume.lineage_commits, resume.generations, resume.observation_commits))):
        return None
    body = memoryview(rest)
    lineage, used = _decode_store(header["stores"][0], body)
    observations, more = _decode_store(header["stores"][1], body[used:])
    if used + more != len(rest):
        return None
    return Record(resume, Snapshot(lineage, observations))


def load(record_dir: Path, paths: LineagePaths) -> Record | None:
    """The lineage's record, or None (absent, unreadable, damaged, unsealed, or another
    audit's)."""
    seal = cache_seal(record_dir, create=False)
    if seal is None:
        return None
    try:
        data = read_regular(record_file(record_dir, paths), MAX_RECORD_BYTES, own_folder=True)
        if data is None:
            return None
        return _decode(data, paths, seal)
    except (OSError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError,
            struct.error):
        return None


def _store(record_dir: Path, paths: LineagePaths, resume: Resume, taken: Snapshot) -> None:
    seal = cache_seal(record_dir, create=True)
    if seal is not None:
        write_cache(record_file(record_dir, paths), _encode(paths, resume, taken, seal))


def _discard(record_dir: Path, paths: LineagePaths) -> None:
    """Forget the record; never through a linked ``.audits`` (nothing in its target)."""
    if os.path.islink(record_dir):
        return
    try:
        os.unlink(record_file(record_dir, paths))
    except OSError:
        return


# ---------------------------------------------------------------- the audit with its record


def audit_recorded(paths: LineagePaths, name: str | None, record_dir: Path, *,
                   full: bool = False,
                   parents: Callable[[str], LineagePaths | None] | None = None) -> LineageAudit:
    """Audit the lineage, resuming from its record when the record still holds (never with
    ``full``); record a consistent verdict, forget any other. Never raises."""
    before = snapshot(paths)  # taken first: a file changed after its read must not be vouched
    record = None if full or before is None else load(record_dir, paths)
    since = record.resume if record is not None and before is not None \
        and before.vouches(record.snapshot, paths) else None
    result = audit_lineage(paths, name, since=since, parents=parents)
    after = snapshot(paths)
    if (result.status == "consistent" and before is not None and after is not None
            and after.covers(before) and result.lineage_head and result.observation_head):
        _store(record_dir, paths, Resume(
            result.lineage_head, result.commits, result.generations, result.observation_head,
            result.observation_commits), after)
    else:
        _discard(record_dir, paths)
    return result
