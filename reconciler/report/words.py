"""Small words the text renderers share: counted nouns with their plural.

Rule: a count shown to a person agrees with its noun (``1 generation``,
``2 generations``); nothing else lives here.
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, word: str, many: str | None = None) -> str:
    """``count`` and ``word`` in agreement: ``plural(1, "path")`` is ``1 path``."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
