"""The model providers: one record each, the one place a provider is described.

Rule: everything ouro knows of a provider that is not how to speak to it lives
in its ``Provider`` record here; spec validation (``reconciler.spec``), the
broker (``kernel.broker``) and the provider probe (``reconciler.engine.probe``)
derive their lists from ``REGISTRY``, never spell a provider's name themselves.
Adding a provider is one record here (plus its wire format in
``broker.providers`` when it speaks HTTP). Plain values, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "BASE_URL_REQUIRED",
    "DEFAULT_BASE_URLS",
    "DEFAULT_KEY_ENV",
    "HTTP_PROVIDERS",
    "KEYED_PROVIDERS",
    "MODEL_LIST_PATHS",
    "OFFLINE_PROVIDERS",
    "PAID_PROVIDERS",
    "PROVIDERS",
    "REGISTRY",
    "STORING_PROVIDERS",
    "Provider",
    "ProviderName",
    "record",
]

# The typed list of provider names, in the order specs and messages list them.
ProviderName = Literal["anthropic", "openai", "openai-compatible", "replay", "echo"]
Wire = Literal["anthropic-messages", "openai-responses", "chat-completions"]


@dataclass(frozen=True)
class Provider:
    """One model provider, as ouro knows it."""

    name: ProviderName
    needs_key: bool  # a request without an API key is refused before anything runs
    offline: bool  # answered by the kernel itself: no network, no key, no price
    key_env: str | None  # the spec's default ``api_key_env`` (None: no default)
    base_url: str | None  # the default API base (None: the spec must give one, or offline)
    models_path: str | None  # the free authenticated GET a probe makes, below the base URL
    wire: Wire | None  # the HTTP wire format it speaks (None: offline)

    @property
    def paid(self) -> bool:
        """Costs money per token: the spec must price it."""
        return not self.offline


REGISTRY: tuple[Provider, ...] = (
    Provider("anthropic", needs_key=True, offline=False, key_env="ANTHROPIC_API_KEY",
             base_url="https://api.anthropic.com", models_path="/v1/models",
             wire="anthropic-messages"),
    Provider("openai", needs_key=True, offline=False, key_env="OPENAI_API_KEY",
             base_url="https://api.openai.com/v1", models_path="/models",
             wire="openai-responses"),
    Provider("openai-compatible", needs_key=False, offline=False, key_env=None,
             base_url=None, models_path="/models", wire="chat-completions"),
    Provider("replay", needs_key=False, offline=True, key_env=None, base_url=None,
             models_path=None, wire=None),
    Provider("echo", needs_key=False, offline=True, key_env=None, base_url=None,
             models_path=None, wire=None),
)
_BY_NAME: dict[str, Provider] = {provider.name: provider for provider in REGISTRY}

PROVIDERS: tuple[ProviderName, ...] = get_args(ProviderName)
OFFLINE_PROVIDERS: tuple[str, ...] = tuple(p.name for p in REGISTRY if p.offline)
PAID_PROVIDERS: tuple[str, ...] = tuple(p.name for p in REGISTRY if p.paid)
HTTP_PROVIDERS: tuple[str, ...] = tuple(p.name for p in REGISTRY if p.wire is not None)
KEYED_PROVIDERS: frozenset[str] = frozenset(p.name for p in REGISTRY if p.needs_key)
DEFAULT_KEY_ENV: dict[str, str | None] = {p.name: p.key_env for p in REGISTRY}
DEFAULT_BASE_URLS: dict[str, str] = {p.name: p.base_url for p in REGISTRY if p.base_url}
MODEL_LIST_PATHS: dict[str, str] = {p.name: p.models_path for p in REGISTRY if p.models_path}
# HTTP providers without a default base URL: the spec must give one.
BASE_URL_REQUIRED: tuple[str, ...] = tuple(p.name for p in REGISTRY
                                           if p.wire is not None and p.base_url is None)
# Providers whose wire can store a response on the provider's side (spec ``model.store``).
STORING_PROVIDERS: tuple[str, ...] = tuple(p.name for p in REGISTRY
                                           if p.wire == "openai-responses")


def record(name: str) -> Provider | None:
    """The record of the provider named ``name`` (None: ouro knows no such provider)."""
    return _BY_NAME.get(name)
