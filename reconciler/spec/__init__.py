"""Specs in: the spec language's models, units, prices, loading with positions.

Rule: reads spec files and nothing else (plus a spec's own git provenance).
Every problem in every file is reported at once, each at ``FILE:LINE:COL``.

May import: ``kernel.config`` (the values a spec becomes), ``errors``.
Nothing above.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the names below, imported on first use: ``__getattr__``)
    from reconciler.spec.models import (
        API_VERSION,
        DEFAULT_API_KEY_ENV,
        KIND,
        MAX_REPLICAS,
        PAID_PROVIDERS,
        SET_KIND,
        CeilingsSpec,
        ForkSpec,
        InstrumentSpec,
        LineageBody,
        LineageSetBody,
        LineageSetSpec,
        LineageSpec,
        Metadata,
        ModelSpec,
        PriceSpec,
        StorageSpec,
        branch_name_problem,
    )
    from reconciler.spec.schema import json_schema

__all__ = [
    "API_VERSION",
    "DEFAULT_API_KEY_ENV",
    "KIND",
    "MAX_REPLICAS",
    "PAID_PROVIDERS",
    "SET_KIND",
    "CeilingsSpec",
    "ForkSpec",
    "InstrumentSpec",
    "LineageBody",
    "LineageSetBody",
    "LineageSetSpec",
    "LineageSpec",
    "Metadata",
    "ModelSpec",
    "PriceSpec",
    "StorageSpec",
    "branch_name_problem",
    "json_schema",
]


_FROM = {name: "reconciler.spec.schema" if name == "json_schema" else "reconciler.spec.models"
         for name in __all__}


def __getattr__(name: str) -> Any:
    """The package's names, imported when first asked for: a module that needs one of the
    pure submodules (``names``, ``units``) does not pay for the models' pydantic classes
    (~80 ms), as the audit's child process does not."""
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_FROM[name]), name)
    globals()[name] = value
    return value
