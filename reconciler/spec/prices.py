"""Known model prices (USD per million tokens), per provider.

Pure data. A spec may omit ``model.price`` only for a model listed here (or an
offline provider, which costs nothing). Prices for ``openai-compatible``
servers are never guessed: a local or third-party server states its own.
"""

from __future__ import annotations

from decimal import Decimal

from reconciler.kernel.base.config import FREE, OFFLINE_PROVIDERS, Price

__all__ = ["KNOWN_PRICES", "known_models", "known_price"]


def _price(input_usd: str, output_usd: str) -> Price:
    return Price(Decimal(input_usd), Decimal(output_usd))


# Where each family's price comes from, and when it was read, is in docs/spec.md ("Known
# prices"; a test keeps that table and this one equal). Prices are the providers' standard
# (not batch, not priority) per-token rates for short contexts: ouro's prompts are bounded
# by max_prompt_bytes (192 KiB by default), far below the long-context thresholds.
KNOWN_PRICES: dict[str, dict[str, Price]] = {
    "anthropic": {
        # Opus: published 2026-05-29 (Opus 4.8), unchanged for 4.5-4.7
        "claude-opus-4-8": _price("5", "25"),
        "claude-opus-4-7": _price("5", "25"),
        "claude-opus-4-6": _price("5", "25"),
        "claude-opus-4-5": _price("5", "25"),
        # Sonnet
        "claude-sonnet-4-6": _price("3", "15"),
        "claude-sonnet-4-5": _price("3", "15"),
        # Haiku: the alias and its dated snapshot
        "claude-haiku-4-5": _price("1", "5"),
        "claude-haiku-4-5-20251001": _price("1", "5"),
    },
    "openai": {
        # GPT-5.6 (preview from 2026-06-26): gpt-5.6 is Sol
        "gpt-5.6": _price("5", "30"),
        "gpt-5.6-sol": _price("5", "30"),
        "gpt-5.6-terra": _price("2.50", "15"),
        "gpt-5.6-luna": _price("1", "6"),
        # GPT-5.5 and the GPT-5.4 family (mini, nano)
        "gpt-5.5": _price("5", "30"),
        "gpt-5.4": _price("2.50", "15"),
        "gpt-5.4-mini": _price("0.75", "4.50"),
        "gpt-5.4-nano": _price("0.20", "1.25"),
    },
}


def known_price(provider: str, model: str) -> Price | None:
    """The price of a known model, ``FREE`` for offline providers, else None."""
    if provider in OFFLINE_PROVIDERS:
        return FREE
    return KNOWN_PRICES.get(provider, {}).get(model)


def known_models(provider: str) -> list[str]:
    return sorted(KNOWN_PRICES.get(provider, {}))
