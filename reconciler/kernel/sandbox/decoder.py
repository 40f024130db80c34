"""The trusted decoder of a life's result archive. Trusted harness.

Rule: only directories, regular files and symlinks that stay inside the tree
publish, within the ceilings; anything else is a ``DecoderRejection`` naming
the offending path (a death of the generation, never an error of the kernel).

The archive is the runner's ``tar --format=gnu`` of /work. Two passes:

1. a structural walk over the raw 512-byte blocks: checksums, a whitelist of
   entry types (regular, directory, symlink, and GNU long-name/long-link
   records no larger than ``MAX_PATH_BYTES``); pax headers, sparse files,
   hardlinks, devices, FIFOs and every other type are refused; the archive must
   end with its two zero blocks followed by zeros only (a truncated archive
   could otherwise pass as a smaller tree);
2. ``tarfile`` in stream mode for the fields, with file data read against
   the remaining byte budget (headers are never trusted for sizes).

Paths: relative, UTF-8, no empty, ``.`` or ``..`` component (after stripping
the leading ``./`` of tar), at most ``max_path_bytes`` (what this host can still
open once the worktree's own prefix is added: ``path_budget``; never more than
``MAX_PATH_BYTES``) and ``MAX_COMPONENT_BYTES`` per component; no component git
refuses in a tree (``gitnames``: ``.git`` and its NTFS and HFS+ disguises, at any
depth); at most ``MAX_DEPTH`` components (libgit2's worktree iterator, which status
and checkout use, gives up at 100 nested directories: a deeper tree could be
committed but never checked or checked out again); no duplicate; no entry below a
symlink or a file. Nothing here or in publication recurses on depth.

Kernel-owned top-level names (``journal.md``, ``.ouroboros-lineage.json``) written by
the organism are dropped with everything below them, as the original instrument's
runner deletes them before archiving: they are neither published nor counted.

Symlinks (decided): the target must be relative, UTF-8, non-empty, at most
``MAX_PATH_BYTES``, without a ``.git`` component, and resolving it from the
link's folder -- following the archive's own symlinks, at most
``MAX_SYMLINK_HOPS`` of them -- must never climb above the tree's root.
Dangling targets inside the tree are allowed.

Counting: files and symlinks count against ``max_files`` (directories are
bounded separately by the same number); file bytes count against
``max_bytes``.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
from dataclasses import dataclass
from typing import Literal

from ..base.config import KERNEL_OWNED_NAMES
from ..base.errors import DecoderRejection
from ..base.gitnames import refused

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255
MAX_DEPTH = 100  # path components: 99 directories and an entry (libgit2's iterator limit)
MAX_SYMLINK_HOPS = 40
BLOCK = 512
_ZERO_BLOCK = bytes(BLOCK)
_DATA_TYPES = {b"0": "file", b"\0": "file", b"5": "dir", b"2": "symlink"}
_LONG_TYPES = {b"L", b"K"}  # GNU long name / long link target
_REFUSED_TYPES = {
    b"1": "hardlink", b"3": "character device", b"4": "block device", b"6": "FIFO",
    b"7": "contiguous file", b"x": "pax header", b"g": "pax global header",
    b"S": "sparse file", b"D": "GNU dump directory", b"M": "multi-volume continuation",
    b"V": "volume header", b"N": "GNU old long name",
}


@dataclass(frozen=True)
class Entry:
    path: str  # relative posix path, validated
    kind: Literal["dir", "file", "symlink"]
    data: bytes  # file bytes, or the symlink target (UTF-8)
    executable: bool


def _reject(message: str, path: str | None = None) -> DecoderRejection:
    where = f" ({path!r})" if path is not None else ""
    return DecoderRejection(f"kernel: decoder: {message}{where}", path=path)


def path_budget(worktree: str | os.PathLike[str]) -> int:
    """Bytes a relative path may take so that ``<worktree>/<path>`` still fits this
    host's PATH_MAX (which counts the terminating NUL), at most ``MAX_PATH_BYTES``."""
    absolute = os.path.abspath(worktree)
    longest = max(len(os.fsencode(absolute)), len(os.fsencode(os.path.realpath(absolute))))
    try:
        limit = os.pathconf(absolute, "PC_PATH_MAX")
    except (OSError, ValueError):
        limit = 4096
    return max(0, min(MAX_PATH_BYTES, limit - longest - 2))


def decode(
    archive: bytes, *, max_files: int, max_bytes: int, max_path_bytes: int = MAX_PATH_BYTES
) -> list[Entry]:
    """The entries of a result archive, in archive order, or ``DecoderRejection``."""
    headers = _walk(archive)
    entries = _read(archive, headers, max_files=max_files, max_bytes=max_bytes,
                    max_path_bytes=min(max_path_bytes, MAX_PATH_BYTES))
    _check_tree(entries)
    return entries


# ---------------------------------------------------------------- pass 1: structure


def _size(field: bytes, at: int) -> int:
    """An octal size field; base-256 sizes (> 8 GiB) are refused."""
    if field[:1] in (b"\x80", b"\xff"):
        raise _reject(f"entry at byte {at} uses a base-256 size")
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise _reject(f"entry at byte {at} has a malformed size") from None


def _checksum_ok(block: bytes) -> bool:
    text = block[148:156].split(b"\0", 1)[0].strip(b" ")
    try:
        stored = int(text, 8)
    except ValueError:
        return False
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    return stored == unsigned


def _walk(archive: bytes) -> int:
    """Check the archive's structure; returns the number of data entries."""
    offset, count = 0, 0
    while True:
        block = archive[offset : offset + BLOCK]
        if len(block) < BLOCK:
            raise _reject("archive is truncated (no end-of-archive marker)")
        if block == _ZERO_BLOCK:
            break
        if not _checksum_ok(block):
            raise _reject(f"bad header checksum at byte {offset}")
        kind = block[156:157]
        size = _size(block[124:136], offset)
        if kind in _REFUSED_TYPES:
            name = block[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
            raise _reject(f"{_REFUSED_TYPES[kind]} entries are not publishable", name)
        if kind in _LONG_TYPES:
            if size > MAX_PATH_BYTES + 1:
                raise _reject(f"long name record of {size} bytes at byte {offset}")
        elif kind in _DATA_TYPES:
            count += 1
            # Directories and symlinks carry no data (tarfile skips none either); an old-style
            # regular entry whose name ends in '/' is a directory to tarfile.
            old_style_dir = kind == b"\0" and block[:100].split(b"\0", 1)[0].endswith(b"/")
            if kind in (b"5", b"2") or old_style_dir:
                size = 0
        else:
            raise _reject(f"unknown entry type {kind!r} at byte {offset}")
        offset += BLOCK + -(-size // BLOCK) * BLOCK
        if offset > len(archive):
            raise _reject("archive is truncated inside an entry")
    trailer = archive[offset:]
    if len(trailer) < 2 * BLOCK or trailer.count(0) != len(trailer):
        raise _reject("archive does not end with zero blocks only")
    return count


# ---------------------------------------------------------------- pass 2: entries


def _text(raw: str, what: str) -> str:
    """tarfile decoded with surrogateescape: a surrogate means the bytes were not UTF-8."""
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        shown = raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise _reject(f"{what} is not valid UTF-8", shown) from None
    return raw


def _normalize(name: str, *, symlink: bool, max_path_bytes: int) -> str | None:
    """The validated relative path; None for the archive's root entry ``.``."""
    if name.startswith("/"):
        raise _reject("absolute path", name)
    path = name
    while path.startswith("./"):
        path = path[2:]
    path = path.rstrip("/") if path not in ("", ".") else path
    if path in ("", "."):
        return None
    if len(path.encode()) > max_path_bytes:
        raise _reject(
            f"path longer than {max_path_bytes} bytes (what fits this host's PATH_MAX "
            "below the lineage's worktree)", name)
    parts = path.split("/")
    if len(parts) > MAX_DEPTH:
        raise _reject(f"path deeper than {MAX_DEPTH} components (git's worktree limit)", name)
    for index, part in enumerate(parts):
        if part in ("", ".", ".."):
            raise _reject("empty, '.' or '..' path component", name)
        if len(part.encode()) > MAX_COMPONENT_BYTES:
            raise _reject(f"path component longer than {MAX_COMPONENT_BYTES} bytes", name)
        if refused(part, symlink=symlink and index == len(parts) - 1):
            raise _reject("a name git refuses in a tree (.git, or a disguise of it)", name)
    return path


def _read(
    archive: bytes, headers: int, *, max_files: int, max_bytes: int, max_path_bytes: int
) -> list[Entry]:
    entries: list[Entry] = []
    seen: dict[str, str] = {}  # path -> kind
    parents: set[str] = set()  # proper prefixes of every entry
    files = dirs = total = 0
    members = 0
    try:
        with tarfile.open(
            fileobj=io.BytesIO(archive), mode="r|", encoding="utf-8", errors="surrogateescape"
        ) as tar:
            for member in tar:
                members += 1
                name = _text(member.name, "path")
                path = _normalize(name, symlink=member.issym(), max_path_bytes=max_path_bytes)
                if member.isdir() and path is None:
                    continue
                if path is None:
                    raise _reject("the tree's root must be a directory", name)
                if path.split("/", 1)[0] in KERNEL_OWNED_NAMES:
                    continue  # the kernel's: deleted before archiving, as the original does
                if name.endswith("/") and not member.isdir():
                    raise _reject("a name ending in '/' that is not a directory", name)
                if path in seen:
                    raise _reject("duplicate path", path)
                if path in parents and not member.isdir():
                    raise _reject("path is used as a directory by an earlier entry", path)
                prefix = path
                while "/" in prefix:
                    prefix = prefix.rsplit("/", 1)[0]
                    kind = seen.get(prefix)
                    if kind == "symlink":
                        raise _reject("path goes through a symlink", path)
                    if kind == "file":
                        raise _reject("path goes through a regular file", path)
                    parents.add(prefix)
                if member.isdir():
                    dirs += 1
                    if dirs > max_files:
                        raise _reject(f"more than {max_files} directories", path)
                    entry = Entry(path, "dir", b"", False)
                elif member.issym():
                    files += 1
                    if files > max_files:
                        raise _reject(f"more than {max_files} files", path)
                    entry = Entry(path, "symlink", _link_target(member, path), False)
                elif member.isreg() and member.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
                    files += 1
                    if files > max_files:
                        raise _reject(f"more than {max_files} files", path)
                    stream = tar.extractfile(member)
                    if stream is None:
                        raise _reject("unreadable file", path)
                    data = stream.read(max_bytes - total + 1)
                    total += len(data)
                    if total > max_bytes:
                        raise _reject(f"more than {max_bytes} bytes of files", path)
                    entry = Entry(path, "file", data, bool(member.mode & 0o111))
                else:
                    raise _reject("only directories, regular files and symlinks publish", path)
                if member.pax_headers:
                    raise _reject("pax headers are not accepted", path)
                seen[path] = entry.kind
                entries.append(entry)
    except DecoderRejection:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise _reject(f"unreadable archive: {exc}") from exc
    if members != headers:
        raise _reject(f"archive has {headers} entries, tarfile read {members}")
    return entries


def _link_target(member: tarfile.TarInfo, path: str) -> bytes:
    target = _text(member.linkname, "symlink target")
    if not target:
        raise _reject("empty symlink target", path)
    if target.startswith("/"):
        raise _reject("symlink target is absolute", path)
    if len(target.encode()) > MAX_PATH_BYTES:
        raise _reject("symlink target too long", path)
    if any(refused(part) for part in target.split("/")):
        raise _reject("symlink target names a .git", path)
    return target.encode()


# ---------------------------------------------------------------- pass 3: symlinks


def _check_tree(entries: list[Entry]) -> None:
    links = {e.path: e.data.decode() for e in entries if e.kind == "symlink"}
    for path, target in links.items():
        _resolve(posixpath.dirname(path), target, links, path)


def _resolve(folder: str, target: str, links: dict[str, str], origin: str) -> None:
    """Resolve ``target`` from ``folder`` through the archive's symlinks; never above root."""
    hops = 0
    stack: list[str] = [p for p in folder.split("/") if p]
    pending = [p for p in target.split("/") if p not in ("", ".")]
    while pending:
        part = pending.pop(0)
        if part == "..":
            if not stack:
                raise _reject("symlink target leaves the tree", origin)
            stack.pop()
            continue
        stack.append(part)
        current = "/".join(stack)
        if current in links:
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                raise _reject("too many levels of symlinks", origin)
            stack.pop()
            pending = [p for p in links[current].split("/") if p not in ("", ".")] + pending
