"""Reading a file a user named (a spec, a saved plan): never more bytes than its limit.

The size is checked BEFORE any byte is loaded: a regular file by its size on
disk (a 1 GiB sparse file is refused at once), anything else (``/dev/zero``, a
pipe, ``<(...)``) by reading at most ``limit + 1`` bytes. Opening never blocks
(a FIFO nobody writes reads as empty). What goes wrong is a ``FileRefused``
whose message says what and why, for the caller to place (FILE:LINE:COL or its
own error type).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["FileRefused", "read_limited"]

_CHUNK = 1 << 16


class FileRefused(Exception):
    """A file is read only when it can be read whole within its size limit."""


def read_limited(path: Path, limit: int, what: str, *, follow: bool = True) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them; ``FileRefused`` otherwise.

    ``what`` names the kind of file in the message ("a spec file", "a plan file").
    ``follow=False``: a link at ``path`` is refused (a record ouro wrote itself).
    """
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | nofollow)
    except OSError as error:
        raise FileRefused(f"cannot read: {error.strerror or error}") from error
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FileRefused("is a folder, not a file")
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise FileRefused(f"too large for {what} ({info.st_size} bytes; at most {limit})")
        os.set_blocking(fd, True)  # a pipe is read to its end, within the limit
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise FileRefused(f"too large for {what} (more than {limit} bytes)")
        return b"".join(chunks)
    except OSError as error:
        raise FileRefused(f"cannot read: {error.strerror or error}") from error
    finally:
        os.close(fd)
