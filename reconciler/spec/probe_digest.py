"""A probe's digest: the sha256 of its digest body's canonical JSON.

Rule: pure (hashlib and json only): the spec computes a probe's digest
(``spec.probes``), and verify recomputes it from each record (``state.probes``)
without the spec's models.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["digest_of"]


def digest_of(body: dict[str, Any]) -> str:
    """sha256 of a digest body's canonical JSON."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()
