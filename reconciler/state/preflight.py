"""Could apply run this spec's generations here? Read-only: the environment and files.

Rule: one home for the check apply makes before it creates a lineage or runs a
generation — the kernel broker's own ``check_config`` (a known provider, its
key variable set and clean, a base_url for openai-compatible, an existing
replay folder, sane limits), and a key variable the spec names being set even
where a key is optional (``api_key_env: null`` is how a keyless server is
written: a named variable that is unset is a mistake, not "no key") — so
that ``ouro plan`` shows as ``refuse`` what apply would refuse, and apply and
plan cannot disagree. It reads the
environment and the file system, and calls no network: probing the provider
is apply's and doctor's job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from reconciler.kernel.base.config import ModelConfig

__all__ = ["api_key", "provider_problem"]


def api_key(model: ModelConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the model's key variable, or None (unset, or no key needed)."""
    if not model.api_key_env:
        return None
    return (os.environ if environ is None else environ).get(model.api_key_env)


def provider_problem(model: ModelConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """Why a broker could not serve ``model`` here (the kernel's words), or None."""
    from reconciler.kernel.base.errors import ProviderConfigError
    from reconciler.kernel.broker import door as broker

    key = api_key(model, environ)
    try:
        broker.check_config(model, key, generation=1, replay_cursor=0)
    except ProviderConfigError as error:
        return str(error).removeprefix("kernel: ")
    if model.api_key_env and not key:  # a server where the key is optional (openai-compatible)
        state = "empty" if key == "" else "not set"
        return (f"provider {model.provider}: api_key_env names {model.api_key_env}, which is "
                f"{state} here, so no key would be sent: set {model.api_key_env}, or write "
                "`api_key_env: null` for a server that takes no key")
    return None
