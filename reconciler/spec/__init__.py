"""Specs in: the spec language's models, units, prices, loading with positions.

Rule: reads spec files and nothing else (plus a spec's own git provenance).
Every problem in every file is reported at once, each at ``FILE:LINE:COL``.

May import: ``kernel.config`` (the values a spec becomes), ``errors``.
Nothing above.
"""

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
