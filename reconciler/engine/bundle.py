"""Read a git bundle's objects into a repository, with pygit2 (libgit2 cannot fetch bundles).

A bundle (``git bundle create``) is a header (``# v2 git bundle`` or ``# v3 git
bundle`` with ``@capability`` lines), its prerequisites (``-<id>``) and refs
(``<id> <ref>``), an empty line, then a packfile. The packfile's objects are
inflated, their deltas resolved (offset and ref deltas) and each is written to
the repository's object database, which checks nothing but stores what it is
given: callers verify what they read (kernel files, by their fingerprint).
Only sha1 bundles are read.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pygit2

from reconciler.errors import KernelStoreError

__all__ = ["BUNDLE_SIGNATURES", "is_bundle", "read_bundle"]

BUNDLE_SIGNATURES = (b"# v2 git bundle\n", b"# v3 git bundle\n")
_OFS_DELTA, _REF_DELTA = 6, 7
_BASE_TYPES = (1, 2, 3, 4)  # commit, tree, blob, tag
_OID_BYTES = 20


def is_bundle(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            start = handle.read(len(BUNDLE_SIGNATURES[0]))
    except OSError:
        return False
    return start in BUNDLE_SIGNATURES


def _bad(path: Path, why: str) -> KernelStoreError:
    return KernelStoreError(f"ouro: {path} is not a readable git bundle ({why})")


def _pack_start(data: bytes, path: Path) -> int:
    """Offset of the packfile after the bundle's header, refs and blank line."""
    position = data.index(b"\n") + 1
    while True:
        end = data.find(b"\n", position)
        if end < 0:
            raise _bad(path, "its header does not end")
        line = data[position:end]
        position = end + 1
        if not line:
            return position
        if line.startswith(b"@") and line != b"@object-format=sha1" and not line.startswith(
                b"@filter"):
            raise _bad(path, f"unsupported capability {line.decode('ascii', 'replace')}")


def _apply_delta(base: bytes, delta: bytes) -> bytes:
    """Git's delta format: source size, target size, then copy/insert instructions."""

    def varint(at: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = delta[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, at

    _, at = varint(0)
    size, at = varint(at)
    out = bytearray()
    while at < len(delta):
        op = delta[at]
        at += 1
        if op & 0x80:  # copy from base: offset and size bytes as flagged
            offset = length = 0
            for bit in range(4):
                if op & (1 << bit):
                    offset |= delta[at] << (8 * bit)
                    at += 1
            for bit in range(3):
                if op & (1 << (4 + bit)):
                    length |= delta[at] << (8 * bit)
                    at += 1
            out += base[offset:offset + (length or 0x10000)]
        elif op:  # insert the next op bytes
            out += delta[at:at + op]
            at += op
        else:
            raise ValueError("delta opcode 0")
    if len(out) != size:
        raise ValueError("delta result has the wrong size")
    return bytes(out)


def _entries(pack: memoryview) -> list[tuple[int, int, bytes, int | bytes | None]]:
    """Each object as (offset, type, inflated data, delta base: offset or id or None)."""
    if bytes(pack[:4]) != b"PACK" or int.from_bytes(pack[4:8], "big") not in (2, 3):
        raise ValueError("no packfile signature")
    count = int.from_bytes(pack[8:12], "big")
    at = 12
    found: list[tuple[int, int, bytes, int | bytes | None]] = []
    for _ in range(count):
        start = at
        byte = pack[at]
        at += 1
        kind = (byte >> 4) & 7
        while byte & 0x80:  # the size, which inflating tells us anyway
            byte = pack[at]
            at += 1
        base: int | bytes | None = None
        if kind == _OFS_DELTA:
            byte = pack[at]
            at += 1
            back = byte & 0x7F
            while byte & 0x80:
                byte = pack[at]
                at += 1
                back = ((back + 1) << 7) | (byte & 0x7F)
            base = start - back
        elif kind == _REF_DELTA:
            base = bytes(pack[at:at + _OID_BYTES])
            at += _OID_BYTES
        elif kind not in _BASE_TYPES:
            raise ValueError(f"object type {kind} at offset {start}")
        inflater = zlib.decompressobj()
        data = inflater.decompress(pack[at:])
        if not inflater.eof:
            raise ValueError(f"truncated object at offset {start}")
        at = len(pack) - len(inflater.unused_data)
        found.append((start, kind, data, base))
    return found


def read_bundle(path: Path, repo: pygit2.Repository) -> int:
    """Write every object of the bundle at ``path`` into ``repo``; returns how many."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KernelStoreError(f"ouro: cannot read {path}: {exc.strerror or exc}") from exc
    if not data.startswith(BUNDLE_SIGNATURES):
        raise _bad(path, "no bundle signature")
    try:
        pack = memoryview(data)[_pack_start(data, path):]
        entries = _entries(pack)
    except (ValueError, IndexError, zlib.error) as exc:
        raise _bad(path, str(exc)) from exc
    resolved: dict[int, tuple[int, bytes]] = {}
    by_id: dict[bytes, tuple[int, bytes]] = {}
    pending = entries
    while pending:
        waiting: list[tuple[int, int, bytes, int | bytes | None]] = []
        for start, kind, body, base in pending:
            if base is None:
                value = (kind, body)
            else:
                source = resolved.get(base) if isinstance(base, int) else by_id.get(base)
                if source is None and isinstance(base, bytes) and pygit2.Oid(raw=base) in repo:
                    stored = repo[pygit2.Oid(raw=base)]
                    source = (stored.type, stored.read_raw())
                if source is None:
                    waiting.append((start, kind, body, base))
                    continue
                try:
                    value = (source[0], _apply_delta(source[1], body))
                except (ValueError, IndexError) as exc:
                    raise _bad(path, f"object at offset {start}: {exc}") from exc
            resolved[start] = value
            by_id[repo.odb.write(value[0], value[1]).raw] = value
        if len(waiting) == len(pending):
            raise _bad(path, "a delta's base is missing (a thin bundle needs its prerequisites)")
        pending = waiting
    return len(resolved)
