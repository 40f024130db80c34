"""pydantic's validation errors as problems at ``FILE:LINE:COL``, in words a user can act on.

``validated`` validates one document against a model; each error is placed by a
``Place`` (the loader's for a Lineage, the set's for a member: at the matrix value
that made it) and worded by ``message`` (an unknown key with its closest allowed
name, a bound with its number, a value shown as written).
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml.nodes import Node, ScalarNode

from reconciler.errors import Problem
from reconciler.spec import names, units
from reconciler.spec.models import LineageSpec
from reconciler.spec.positions import dotted, locate_node, mark, problem
from reconciler.spec.sources import Source

__all__ = ["Place", "message", "plain_place", "validated"]

# Where a field's problem is written: (node, field shown, prefix of the message).
Place = typing.Callable[[Node, Sequence[Any], bool], tuple[Node, str, str]]
_Model = typing.TypeVar("_Model", bound=BaseModel)


def _model_at(loc: Sequence[Any], root: type[BaseModel] = LineageSpec) -> type[BaseModel] | None:
    model: type[BaseModel] = root
    for part in loc:
        annotation = next(
            (f.annotation for n, f in model.model_fields.items() if (f.alias or n) == part),
            None,
        )
        candidates = [annotation, *typing.get_args(annotation)]
        found = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not found:
            return None
        model = found[0]
    return model


def message(error: Any, node: Node, root: type[BaseModel] = LineageSpec) -> str:
    """One pydantic error (``errors()`` item) in words, for the value at ``node``."""
    kind, loc, message = error["type"], error["loc"], str(error["msg"])
    given = error.get("input")
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
        if isinstance(given, float) and isinstance(node, ScalarNode):
            # Show the number as written (1.50), not as the float it became (1.5).
            message = message.replace(f'write "{given!r}"', f'write "{node.value}"')
        return message
    if kind == "invalid_key":
        return f"unknown field; keys are strings (got {units.describe(given)})"
    if kind == "missing":
        return "required, but missing"
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1], root)
        allowed = [f.alias or n for n, f in model.model_fields.items()] if model else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown field{hint} (allowed here: {', '.join(allowed)})"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a mapping, not {units.describe(given)}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"must be {expected}, not {units.describe(given)}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = next(iter(error.get("ctx", {}).values()), "?")
        relation = {"greater_than_equal": "at least", "greater_than": "more than",
                    "less_than_equal": "at most", "less_than": "less than"}[kind]
        return f"must be {relation} {bound}, not {units.describe(given)}"
    if kind == "string_pattern_mismatch":
        rule = names.WORDS.get(str(error.get("ctx", {}).get("pattern", "")))
        if rule is not None:
            return f"must be {rule} (got {units.describe(given)})"
    if kind == "string_type" and isinstance(given, int | float | bool):
        return f"must be a string, not {units.describe(given)}: quote it"
    return f"{message[:1].lower()}{message[1:]} (got {units.describe(given)})"


def plain_place(node: Node, loc: Sequence[Any], key: bool) -> tuple[Node, str, str]:
    """A field's problem at its own node, shown by its path (a Lineage, a set's own fields)."""
    return locate_node(node, loc, key=key), dotted(loc), ""


def validated(model: type[_Model], source: Source, node: Node, value: Any,
              problems: list[Problem], place: Place) -> _Model | None:
    """``model`` from ``value``, or None with each problem where ``place`` puts it
    (the node, the field shown and a prefix for the message)."""
    try:
        return model.model_validate(value, context={"base_dir": source.path.parent})
    except ValidationError as error:
        for detail in error.errors(include_url=False):
            loc = detail["loc"]
            key = detail["type"] in ("extra_forbidden", "invalid_key")
            found, field, prefix = place(node, loc, key)
            problems.append(problem(source.shown, *mark(found), field,
                                    prefix + message(detail, found, model)))
    except Exception as error:  # a bug in a validator must still not be a traceback
        problems.append(problem(
            source.shown, *mark(node), "",
            f"internal error while validating ({type(error).__name__}: {error}); "
            "this is a bug in ouro",
        ))
    return None

