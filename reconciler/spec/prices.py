"""Known model prices (USD per million tokens), per provider.

Pure data. A spec may omit ``model.price`` only for a model listed here (or an
offline provider, which costs nothing). Prices for ``openai-compatible``
servers are never guessed: a local or third-party server states its own.
"""

from __future__ import annotations

from decimal import Decimal

from reconciler.kernel.config import FREE, OFFLINE_PROVIDERS, Price

__all__ = ["KNOWN_PRICES", "known_models", "known_price"]


def _price(input_usd: str, output_usd: str) -> Price:
    return Price(Decimal(input_usd), Decimal(output_usd))


KNOWN_PRICES: dict[str, dict[str, Price]] = {
    "anthropic": {
        "claude-opus-4-8": _price("5", "25"),
        "claude-opus-4-7": _price("5", "25"),
        "claude-opus-4-6": _price("5", "25"),
    },
    "openai": {
        "gpt-5.6": _price("5", "30"),
        "gpt-5.6-sol": _price("5", "30"),
        "gpt-5.6-terra": _price("2.50", "15"),
        "gpt-5.6-luna": _price("1", "6"),
    },
}


def known_price(provider: str, model: str) -> Price | None:
    """The price of a known model, ``FREE`` for offline providers, else None."""
    if provider in OFFLINE_PROVIDERS:
        return FREE
    return KNOWN_PRICES.get(provider, {}).get(model)


def known_models(provider: str) -> list[str]:
    return sorted(KNOWN_PRICES.get(provider, {}))
