"""A derived, deletable cache file (summaries, verdict records): written atomically
(a temp file beside it, then a rename), and simply not written when it cannot be:
a cache that is missing costs a rebuild, never a failure."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_cache"]


def write_cache(target: Path, data: bytes) -> bool:
    """Write ``data`` to ``target``; False (nothing left behind) when it cannot be written."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temp, target)
        except BaseException:
            os.unlink(temp)
            raise
    except OSError:
        return False
    return True
