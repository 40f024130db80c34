"""The public names of the spec layer are chosen and listed; this guards the list."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from reconciler import spec
from reconciler.spec import files, load, prices, units

PUBLIC = {
    files: ["FileRefused", "read_limited"],
    load: ["MAX_ALIAS_NODES", "MAX_FILE_BYTES", "MAX_FLOW_DEPTH", "SPEC_SUFFIXES", "LoadedSpec",
           "ParentPlaces", "default_places", "load_specs", "state_dir"],
    spec: ["API_VERSION", "DEFAULT_API_KEY_ENV", "KIND", "MAX_REPLICAS", "PAID_PROVIDERS",
           "SET_KIND", "CeilingsSpec", "ForkSpec", "LineageSetBody", "LineageSetSpec",
           "InstrumentSpec", "LineageBody", "LineageSpec", "Metadata", "ModelSpec", "PriceSpec",
           "StorageSpec", "branch_name_problem", "json_schema"],
    units: ["DURATION_PATTERN", "MONEY_PATTERN", "POSITIVE_DURATION_PATTERN",
            "POSITIVE_MONEY_PATTERN", "POSITIVE_SIZE_PATTERN", "SIZE_PATTERN", "describe",
            "format_duration", "format_size", "kind", "parse_duration", "parse_money",
            "parse_size"],
    prices: ["KNOWN_PRICES", "known_models", "known_price"],
}


@pytest.mark.parametrize("module", list(PUBLIC), ids=lambda m: m.__name__)
def test_public_names(module: ModuleType) -> None:
    assert sorted(module.__all__) == sorted(PUBLIC[module])
    assert all(hasattr(module, name) for name in module.__all__)


def test_the_contract_signatures() -> None:
    """The other layers code against these exact signatures."""
    assert str(inspect.signature(load.load_specs)) == (
        "(paths: 'Sequence[Path]', *, state_dir: 'Path | None' = None) -> 'list[LoadedSpec]'"
    )
    assert str(inspect.signature(load.state_dir)) == (
        "(explicit: 'Path | None' = None) -> 'Path'"
    )
    fields = [f for f in load.LoadedSpec.__dataclass_fields__]
    assert fields == ["spec", "file", "document_index", "line", "sha256", "declared_branch",
                      "declared_observation_branch", "probes", "set_name", "member", "fork_parent",
                      "recorded_dir"]
    for name in ("paths", "model", "ceilings"):
        assert callable(getattr(load.LoadedSpec, name))
    assert isinstance(load.LoadedSpec.name, property)
    assert isinstance(load.LoadedSpec.instrument_pin, property)
