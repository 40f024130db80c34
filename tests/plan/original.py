"""Lineages with the original instrument's layout, made in tests.

Its metadata (repository, ref, commit and fingerprint of the shared fixture), and
branches named after the worktree's folder (``peer``, ``observations/peer``), as
that instrument's worktree tooling makes them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from reconciler.kernel.base.config import Identity, LineagePaths
from tests.observe.builder import SEED_ORGANISM, LineageBuilder

__all__ = ["CALL", "ORIGINAL", "folder_paths", "peer"]

ORIGINAL = Identity(
    repository="https://github.com/scottviteri/ouroboros",
    ref="main-with-debian-emacs-path",
    commit="0b8df4c1442a055ec918cca8054cdf01f7b4ac33",
    fingerprint="d8cdd12a0d8073ceb604bfca22c8cfe02100f878a7f7929abbe6c7f2c28d5067",
)
CALL = {"accounted_usd": "0.25"}


def folder_paths(root: Path, name: str, *, branch: str | None = None) -> LineagePaths:
    """The original instrument's worktree layout: branches named after the folder."""
    branch = branch or name
    return LineagePaths(root / name, root / f"{name}.git", root / f"{name}.observations",
                        branch, f"observations/{branch}")


class _Sound(LineageBuilder):
    """Metadata whose seed digest is the seed's, so that ``ouro verify`` finds it consistent."""

    def lineage_metadata(self) -> dict[str, Any]:
        return {**super().lineage_metadata(),
                "seed_sha256": hashlib.sha256(SEED_ORGANISM).hexdigest()}


def peer(root: Path, *, identity: Identity = ORIGINAL, name: str = "peer") -> LineageBuilder:
    """Three generations (no-change, died, changed), two of them with a paid model call."""
    builder = _Sound(root, identity=identity, paths=folder_paths(root, name))
    builder.gen(calls=[CALL])
    builder.external_edit()
    builder.gen("died", calls=[CALL])
    builder.gen("changed")
    return builder
