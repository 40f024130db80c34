"""The envelope of every JSON document ouro prints or writes: ``format_version`` and ``kind``.

Rule: one version, one builder. Every document opens with ``format_version`` (this
module's ``FORMAT_VERSION``, the same for every kind) and its ``kind``, then its own
fields. A field may be added to a document, never renamed or dropped, without
bumping ``FORMAT_VERSION``. The kinds: ``ouro-plan``, ``ouro-status``,
``ouro-apply``, ``ouro-verify``, ``ouro-log``, ``ouro-show``, ``ouro-kernels``,
``ouro-reproduce``, the controller's ``ouro-controller-status``, the saved plan's
``ouro-plan-file`` (which also carries the ``format`` its reader checks), ``ouro-compare``
and ``ouro-best``.

May import nothing of reconciler: every layer above the kernel builds its documents here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT_VERSION", "KINDS", "envelope"]

FORMAT_VERSION = 1
KINDS = ("ouro-plan", "ouro-status", "ouro-apply", "ouro-verify", "ouro-log", "ouro-show",
         "ouro-kernels", "ouro-plan-file", "ouro-controller-status", "ouro-reproduce",
         "ouro-compare", "ouro-best")


def envelope(kind: str, **fields: Any) -> dict[str, Any]:
    """A document of ``kind``: ``format_version`` and ``kind`` first, then ``fields``."""
    if kind not in KINDS:
        raise ValueError(f"{kind!r} is not a kind of ouro's JSON documents: add it to KINDS")
    return {"format_version": FORMAT_VERSION, "kind": kind, **fields}
