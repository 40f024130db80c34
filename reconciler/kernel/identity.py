"""This instrument's physics fingerprint. Trusted harness; never mounted writable.

The fingerprint is a sha256 over the kernel's trusted runtime files: for each
file, in sorted name order, its name and its bytes, each prefixed with its
length as 8 big-endian bytes. Any change to any of them is a change of physics.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent
TRUSTED_SUFFIXES = (".py", ".sh", ".el")
OBJECT_ID = re.compile(r"\A(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")


def trusted_files(kernel_dir: Path = KERNEL_DIR) -> list[Path]:
    """The files whose bytes define the physics, in fingerprint order."""
    return sorted(
        (p for p in kernel_dir.iterdir() if p.is_file() and p.suffix in TRUSTED_SUFFIXES),
        key=lambda p: p.name,
    )


def is_trusted_name(name: str) -> bool:
    """Is a file of this name (in the kernel's folder) part of the physics?"""
    return "/" not in name and name.endswith(TRUSTED_SUFFIXES)


def fingerprint_of(files: Mapping[str, bytes]) -> str:
    """The fingerprint of a kernel given as ``{file name: bytes}`` (trusted names only)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        for part in (name.encode("utf-8"), files[name]):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


def fingerprint(kernel_dir: Path = KERNEL_DIR) -> str:
    return fingerprint_of({path.name: path.read_bytes() for path in trusted_files(kernel_dir)})


def is_object_id(text: str) -> bool:
    """A full git object id: 40 (sha1) or 64 (sha256) lowercase hex digits."""
    return bool(OBJECT_ID.match(text))
