"""The link rule: ouro reads no spec, and nothing a spec names, through a symbolic link.

A spec repository is someone else's commit: a link there can point at any file
the reader may read (an environment file of API keys), and whatever reads it could
quote it back (a webhook, a status file, a CI log). So a link is refused by its
name, where a spec file or folder is listed (``reconciler.spec.sources``) and on
the way from a spec's folder to a folder it names (a replay folder, a probe's
files); it is never followed, and nothing behind it is read.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["link_between", "link_problem"]


def link_problem(shown: str, what: str) -> str:
    """The message for a link where a spec's ``what`` (file, folder) is read."""
    return (f"{shown} is a symbolic link; ouro reads no spec through a link: replace it "
            f"with the {what}")


def link_between(base: Path, target: Path) -> Path | None:
    """The first symbolic link on the way from folder ``base`` down to ``target`` (both
    absolute and normalised; ``target`` itself included), or None. A ``target`` not
    below ``base`` is checked from the root (every component of it)."""
    start = base if target.is_relative_to(base) else Path(target.anchor)
    current = start
    for part in target.relative_to(start).parts:
        current = current / part
        try:
            if os.path.islink(current):
                return current
        except (OSError, ValueError):
            return None
    return None
