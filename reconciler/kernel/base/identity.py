"""This instrument's physics fingerprint. Trusted harness; never mounted writable.

The fingerprint (v2) is a sha256 over every trusted file of the kernel's whole
tree (``kernel/`` and its sub-packages): a file is trusted if its name ends in
one of ``TRUSTED_SUFFIXES`` and no folder on its way is ``__pycache__``. Each
file is named by its path relative to the kernel's folder, in POSIX form
(``base/config.py``); in the byte order of those paths (``sorted`` over their
strings), the path (UTF-8) and then the file's bytes are each fed to the digest
prefixed with their length as 8 big-endian bytes. Any change to any of them,
a file added, removed or moved, is a change of physics.

Fingerprint v1 (every kernel before physics release 2) is the same rule over
the files directly in the kernel's folder, named by file name: for a flat kernel
the two agree, so a v1 kernel's fingerprint is ``fingerprint_of`` its files.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

# The kernel's root: this file is ``<kernel>/base/identity.py``.
KERNEL_DIR = Path(__file__).resolve().parent.parent
TRUSTED_SUFFIXES = (".py", ".sh", ".el")
BYTECODE_DIR = "__pycache__"
OBJECT_ID = re.compile(r"\A(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")


def is_trusted_path(relative: str) -> bool:
    """Is the file at this relative POSIX path (in the kernel's tree) part of the physics?"""
    parts = PurePosixPath(relative).parts
    return (bool(parts) and relative == "/".join(parts) and relative.endswith(TRUSTED_SUFFIXES)
            and not any(part in (BYTECODE_DIR, ".", "..") for part in parts))


def is_trusted_name(name: str) -> bool:
    """Is a file of this name, directly in a v1 kernel's folder, part of its physics?"""
    return "/" not in name and is_trusted_path(name)


def trusted_files(kernel_dir: Path = KERNEL_DIR) -> dict[str, Path]:
    """The files whose bytes define the physics: {relative POSIX path: file}, sorted."""
    found: dict[str, Path] = {}
    for root, dirs, names in os.walk(kernel_dir):
        dirs[:] = sorted(d for d in dirs if d != BYTECODE_DIR)
        for name in names:
            path = Path(root) / name
            relative = path.relative_to(kernel_dir).as_posix()
            if is_trusted_path(relative) and path.is_file():
                found[relative] = path
    return dict(sorted(found.items()))


def read_trusted(kernel_dir: Path = KERNEL_DIR) -> dict[str, bytes]:
    """The kernel's trusted files as ``{relative path: bytes}``."""
    return {relative: path.read_bytes() for relative, path in trusted_files(kernel_dir).items()}


def fingerprint_of(files: Mapping[str, bytes]) -> str:
    """The fingerprint of a kernel given as ``{relative POSIX path: bytes}`` (trusted only)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        for part in (name.encode("utf-8"), files[name]):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


def fingerprint(kernel_dir: Path = KERNEL_DIR) -> str:
    return fingerprint_of(read_trusted(kernel_dir))


def is_object_id(text: str) -> bool:
    """A full git object id: 40 (sha1) or 64 (sha256) lowercase hex digits."""
    return bool(OBJECT_ID.match(text))
