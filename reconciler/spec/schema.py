"""The JSON Schema of one spec document (what ``ouro schema`` prints, and schema.json):
the models' own schema, with every unit field's bounds, both kinds (Lineage and
LineageSet) chosen by ``kind``. For editors: the models' validators are the authority.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from reconciler.spec import probes as probe_specs
from reconciler.spec import units
from reconciler.spec.models import (
    KIND,
    MAX_REPLICAS,
    SET_KIND,
    CeilingsSpec,
    InstrumentSpec,
    LineageBody,
    LineageSetBody,
    LineageSpec,
    Metadata,
    ModelSpec,
    PriceSpec,
    StorageSpec,
)
from reconciler.spec.names import MATRIX_KEY
from reconciler.spec.selection import SelectionSpec

__all__ = ["json_schema"]


_POSITIVE = {
    units.SIZE_PATTERN: units.POSITIVE_SIZE_PATTERN,
    units.DURATION_PATTERN: units.POSITIVE_DURATION_PATTERN,
}


def _unit_bounds(model: type[BaseModel], properties: dict[str, Any]) -> None:
    """A unit field's ``ge``/``le`` into its schema: the integer branch's minimum and
    maximum, and for ``ge >= 1`` the string pattern that refuses zero. (The largest
    string, e.g. ``99999999T``, is beyond what a pattern can bound: ouro refuses it.)"""
    for name, info in model.model_fields.items():
        schema = properties.get(info.alias or name)
        if not isinstance(schema, dict) or "anyOf" not in schema:
            continue
        low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
        high = next((m.le for m in info.metadata if hasattr(m, "le")), None)
        branches = [b for b in schema["anyOf"] if isinstance(b, dict)]
        for branch in branches:
            if branch.get("type") == "integer":
                if low is not None:
                    branch["minimum"] = low
                if high is not None:
                    branch["maximum"] = high
            elif branch.get("pattern") in _POSITIVE and low is not None and low >= 1:
                branch["pattern"] = _POSITIVE[branch["pattern"]]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one spec document (what ``ouro schema`` prints): the models'
    own schema, with every unit field's bounds (see ``_unit_bounds``)."""
    schema = LineageSpec.model_json_schema(by_alias=True, mode="validation")
    definitions = schema.get("$defs", {})
    for model in (LineageSpec, Metadata, LineageBody, ModelSpec, PriceSpec, CeilingsSpec,
                  StorageSpec, InstrumentSpec, probe_specs.ProbeCeilingsSpec):
        target = schema if model is LineageSpec else definitions.get(model.__name__, {})
        _unit_bounds(model, target.get("properties", {}))
    _with_sets(schema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _with_sets(schema: dict[str, Any]) -> None:
    """Both kinds in one schema: the same four fields, ``spec`` chosen by ``kind`` (oneOf).

    A set's template is LineageBody's schema with nothing required (a matrix key may
    supply any field); its values are checked per member by the loader."""
    definitions = schema.setdefault("$defs", {})
    body = schema["properties"]["spec"]
    template = {k: v for k, v in definitions["LineageBody"].items() if k != "required"}
    template["title"] = "LineageTemplate"
    definitions["LineageTemplate"] = template
    selection = SelectionSpec.model_json_schema(by_alias=True, mode="validation")
    definitions.update(selection.pop("$defs", {}))
    definitions["SelectionSpec"] = selection
    definitions["LineageSetBody"] = {
        "additionalProperties": False,
        "description": LineageSetBody.__doc__.split("\n")[0] if LineageSetBody.__doc__ else "",
        "properties": {
            "replicas": {"type": "integer", "minimum": 1, "maximum": MAX_REPLICAS,
                         "default": 1, "description": "members per matrix cell"},
            "matrix": {"type": "object", "default": {},
                       "propertyNames": {"pattern": MATRIX_KEY.pattern},
                       "additionalProperties": {"type": "array", "minItems": 1},
                       "description": "spec field paths to the values they take"},
            "template": {"$ref": "#/$defs/LineageTemplate"},
            "selection": {"$ref": "#/$defs/SelectionSpec"},
        },
        "required": ["template"],
        "title": "LineageSetBody",
        "type": "object",
    }
    schema["properties"]["kind"] = {"enum": [KIND, SET_KIND], "title": "Kind", "type": "string"}
    schema["properties"]["spec"] = {"description": "by kind: a LineageBody or a LineageSetBody"}
    schema["oneOf"] = [
        {"properties": {"kind": {"const": KIND}, "spec": body}},
        {"properties": {"kind": {"const": SET_KIND},
                        "spec": {"$ref": "#/$defs/LineageSetBody"}}},
    ]
