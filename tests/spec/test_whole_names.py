"""Every name matches its rule whole: a valid name with a newline after it is refused
(issue 36, item 4; Python's ``$`` also matches before a final newline).

Two kinds of test: one per named field, through the loader as a user writes it (a
double-quoted YAML string ending in ``\\n``), and a property over every pattern the
spec models use, collected from the models themselves (field constraints, their JSON
Schema extras and types) and from the spec modules' compiled patterns, each applied
the way ouro applies it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError, WithJsonSchema

import reconciler.spec
from reconciler.engine.probes.output import parse_metrics
from reconciler.errors import SpecError
from reconciler.spec import names, units
from reconciler.spec.load import load_specs
from reconciler.spec.models import LineageSetSpec, LineageSpec
from reconciler.spec.select import parse

# --- each named field, through the loader ---------------------------------------------

LINEAGE = """\
apiVersion: ouro/v1
kind: Lineage
metadata: {{name: {name}, labels: {{{label_key}: {label_value}}}}}
spec:
  generations: 1
  model: {{provider: openai-compatible, name: {model}, base_url: "http://127.0.0.1:9/v1",
          api_key_env: {key_env}, price: {{input_usd_per_mtok: "1", output_usd_per_mtok: "1"}}}}
  from: {{lineage: {parent}, generation: 1}}
  executor: {{slurm: {{partition: {partition}, account: {account}, sbatch: [{sbatch}]}}}}
  probes: [{{name: {probe}, run: ["true"]}}]
  until: [{{probe: {until_probe}, metric: {metric}, at_least: 1}}]
"""
GOOD = {"name": "child", "label_key": "team", "label_value": "evo", "model": "m-1",
        "key_env": "MY_KEY", "parent": "parent", "partition": "short", "account": "lab",
        "sbatch": '"--qos=low"', "probe": "size", "until_probe": "size", "metric": "bytes"}
SET = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {{name: {name}}}
spec:
  matrix: {{{key}: [1, 2]}}
  template: {{generations: 1, model: {{provider: echo}}}}
"""
# field -> (the template key, where the problem is, what it names)
FIELDS = {
    "metadata.name": ("name", "3:18", "metadata.name"),
    "label key": ("label_key", "3:", "metadata.labels"),
    "label value": ("label_value", "3:", "metadata.labels"),
    "model.name": ("model", "6:", "spec.model.name"),
    "api_key_env": ("key_env", "7:", "spec.model.api_key_env"),
    "from.lineage": ("parent", "8:", "spec.from.lineage"),
    "slurm partition": ("partition", "9:", "spec.executor.slurm.partition"),
    "slurm account": ("account", "9:", "spec.executor.slurm.account"),
    "sbatch option": ("sbatch", "9:", "spec.executor.slurm.sbatch.0"),
    "probe name": ("probe", "10:", "spec.probes.0.name"),
    "until metric": ("metric", "11:", "spec.until.0.metric"),
}


def _spec(tmp_path: Path, **given: str) -> Path:
    values = dict(GOOD)
    for key, value in given.items():
        values[key] = value
        if key == "probe":
            values["until_probe"] = value
    path = tmp_path / "spec.yaml"
    path.write_text(LINEAGE.format(**values))
    return path


def test_the_spec_with_every_named_field_is_valid(tmp_path: Path) -> None:
    (loaded,) = load_specs([_spec(tmp_path)], state_dir=tmp_path / "state")
    assert loaded.name == "child" and loaded.labels == {"team": "evo"}


def _quoted_with_newline(value: str) -> str:
    return '"' + value.strip('"') + '\\n"'


@pytest.mark.parametrize("field", list(FIELDS))
def test_a_name_ending_in_a_newline_is_refused_at_its_field(tmp_path: Path, field: str) -> None:
    key, where, shown = FIELDS[field]
    path = _spec(tmp_path, **{key: _quoted_with_newline(GOOD[key])})
    with pytest.raises(SpecError) as raised:
        load_specs([path], state_dir=tmp_path / "state")
    found = [str(p) for p in raised.value.problems]
    assert any(f"{path}:{where}" in p and f": {shown}: " in p for p in found), found


@pytest.mark.parametrize(("name", "key"), [('"evo\\n"', "ceilings.wall"),
                                           ("evo", '"ceilings.wall\\n"')],
                         ids=["set name", "matrix key"])
def test_a_set_name_or_matrix_key_ending_in_a_newline_is_refused(
        tmp_path: Path, name: str, key: str) -> None:
    path = tmp_path / "set.yaml"
    path.write_text(SET.format(name=name, key=key))
    with pytest.raises(SpecError) as raised:
        load_specs([path], state_dir=tmp_path / "state")
    field = "metadata.name" if name != "evo" else "spec.matrix.ceilings.wall\\n"
    assert any(f": {field}: " in str(p) for p in raised.value.problems), raised.value


def test_a_probe_metric_or_a_selected_name_ending_in_a_newline_is_refused() -> None:
    metrics, why = parse_metrics(b'{"bytes\\n": 1}')
    assert metrics is None and why is not None and "is not a metric name" in why
    assert parse_metrics(b'{"bytes": 1}')[0] == {"bytes": 1}
    assert parse("scribe").name == "scribe"
    assert parse("scribe\n").name is None  # never the lineage's name (a label's, at most)


# --- every pattern of the spec models, as a property -------------------------------

# Compiled patterns of reconciler.spec that are no name's rule, and why they may
# accept a final newline: each is a grammar with white space in it, or is not a check.
NOT_NAMES = {
    "units._SIZE_RE": "sizes: white space around the number is the grammar's",
    "units._DURATION_PART": "durations: a part, found by finditer, not a check",
    "units._DURATION_RE": "durations: white space between parts is the grammar's",
    "units._MONEY_RE": "money: white space around the number is the grammar's",
    "sets._SLUG_JUNK": "what a slug replaces (re.sub), not a check",
    "select._EQUALITY": "a selector: white space around its parts is the grammar's",
    "select._SET": "a selector: white space around its parts is the grammar's",
    "select._EXISTS": "a selector: white space around its parts is the grammar's",
    "yamldocs._QUOTED": "what an error message drops, not a check",
    "yamldocs._GRAMMAR": "what an error message keeps, not a check",
}
# Field patterns (for editors) that are no name's rule: white space is the grammar's, and
# the validator strips it (a unit, a commit id), or the value is a path (any byte but NUL).
NOT_NAME_FIELD_PATTERNS = {
    units.SIZE_PATTERN, units.POSITIVE_SIZE_PATTERN, units.DURATION_PATTERN,
    units.POSITIVE_DURATION_PATTERN, units.MONEY_PATTERN, units.POSITIVE_MONEY_PATTERN,
    r"^\s*([0-9a-fA-F]{40}|[0-9a-fA-F]{64})\s*$",  # instrument.commit: stripped
    r"^[^\x00]*[^\x00\s][^\x00]*$",  # a path
}


def _spec_modules() -> Iterator[Any]:
    for info in pkgutil.iter_modules(reconciler.spec.__path__):
        yield importlib.import_module(f"reconciler.spec.{info.name}")


def _compiled() -> dict[str, re.Pattern[str]]:
    found: dict[str, re.Pattern[str]] = {}
    for module in _spec_modules():
        for attribute, value in vars(module).items():
            if isinstance(value, re.Pattern) and not any(
                    value is rule for rule in names.NAME_PATTERNS.values()):
                found[f"{module.__name__.rsplit('.', 1)[-1]}.{attribute}"] = value
    return found


def _models(root: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[type[BaseModel]]:
    if root in seen:
        return
    seen.add(root)
    yield root
    for field in root.model_fields.values():
        stack = [field.annotation]
        while stack:
            annotation = stack.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                yield from _models(annotation, seen)
            stack.extend(typing.get_args(annotation))


def _patterns_in(schema: Any) -> Iterator[str]:
    """Every ``pattern`` of a JSON Schema fragment, but those under ``not``."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key != "not":
                yield from _patterns_in(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _patterns_in(item)


def _field_patterns() -> dict[str, str]:
    """(model.field: pattern) for every pattern a spec model's field carries."""
    found: dict[str, str] = {}
    seen: set[type[BaseModel]] = set()
    for root in (LineageSpec, LineageSetSpec):
        for model in _models(root, seen):
            for name, field in model.model_fields.items():
                texts: list[str] = []
                for meta in field.metadata:
                    if isinstance(getattr(meta, "pattern", None), str):
                        texts.append(meta.pattern)
                    if isinstance(meta, WithJsonSchema):
                        texts.extend(_patterns_in(meta.json_schema))
                extra = field.json_schema_extra
                if callable(extra):
                    made: dict[str, Any] = {}
                    extra(made)  # type: ignore[call-arg]
                    extra = made
                texts.extend(_patterns_in(extra))
                for arg in typing.get_args(field.annotation):
                    for meta in getattr(arg, "__metadata__", ()):
                        if isinstance(meta, WithJsonSchema):
                            texts.extend(_patterns_in(meta.json_schema))
                for i, text in enumerate(dict.fromkeys(texts)):
                    found[f"{model.__name__}.{name}[{i}]"] = text
    return found


FIELD_PATTERNS = _field_patterns()
NAME_PATTERNS = {
    **{f"names.{key}": value.pattern for key, value in names.NAME_PATTERNS.items()},
    **{key: value for key, value in FIELD_PATTERNS.items()
       if value not in NOT_NAME_FIELD_PATTERNS},
}


def test_the_patterns_were_collected() -> None:
    """The walk finds the fields it must (a walk that finds nothing proves nothing)."""
    assert {"Metadata.name[0]", "Metadata.labels[0]", "Metadata.labels[1]",
            "ModelSpec.name[0]", "ModelSpec.api_key_env[0]", "ForkSpec.lineage[0]",
            "ProbeSpec.name[0]", "UntilSpec.metric[0]", "SlurmSpec.partition[0]",
            "SlurmSpec.account[0]", "SlurmSpec.sbatch[0]"} <= set(NAME_PATTERNS)
    assert len(NAME_PATTERNS) >= 20


def test_every_compiled_pattern_of_the_spec_is_a_name_rule_or_says_why_not() -> None:
    """A new compiled pattern in reconciler.spec is either in names.py (applied whole)
    or listed above with its reason."""
    assert set(_compiled()) == set(NOT_NAMES)


@pytest.mark.parametrize("where", sorted(NAME_PATTERNS))
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_valid_then_a_newline_is_refused(where: str, data: st.DataObject) -> None:
    pattern = re.compile(NAME_PATTERNS[where])
    valid = data.draw(st.from_regex(pattern, fullmatch=True))
    assume(names.whole(pattern, valid) is not None)
    assert names.whole(pattern, valid + "\n") is None, (where, valid)


# Fields valid only in another form of their model than the full spec's instance.
# a field another form of its model takes is tried on that form: a fork by set member,
# a model of provider recorded (the lineage whose replies answer)
OTHER_FORM: dict[str, dict[str, Any]] = {"ForkSpec.set": {"lineage": "", "replica": 0},
                                         "ModelSpec.lineage": {"provider": "recorded"}}


def _instance_of_every_model(tmp_path: Path) -> dict[type[BaseModel], BaseModel]:
    (loaded,) = load_specs([_spec(tmp_path)], state_dir=tmp_path / "state")
    found: dict[type[BaseModel], BaseModel] = {}
    stack: list[Any] = [loaded.spec]
    while stack:
        value = stack.pop()
        if isinstance(value, BaseModel):
            found.setdefault(type(value), value)
            stack.extend(getattr(value, name) for name in type(value).model_fields)
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return found


@pytest.mark.parametrize("where", sorted(k for k in NAME_PATTERNS if not k.startswith("names.")))
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_each_field_refuses_valid_then_a_newline(
        tmp_path: Path, where: str, data: st.DataObject) -> None:
    """The field itself (its validator, its constraint), as pydantic applies it: where a
    valid value is accepted, the same with a newline after it is not."""
    model_name, _, rest = where.partition(".")
    field, index = rest.split("[")[0], int(rest.split("[")[1].rstrip("]"))
    instances = _instance_of_every_model(tmp_path)
    model = next(m for m in instances if m.__name__ == model_name)
    pattern = re.compile(NAME_PATTERNS[where])
    valid = data.draw(st.from_regex(pattern, fullmatch=True))
    assume(names.whole(pattern, valid) is not None)
    current = getattr(instances[model], field)

    def value(text: str) -> Any:
        if isinstance(current, dict):  # labels: [0] the keys' pattern, [1] the values'
            return {text: "v"} if index == 0 else {"k": text}
        return [text] if isinstance(current, list) else text  # sbatch: one item

    validator = model.__pydantic_validator__
    fields = {**dict(instances[model]), **OTHER_FORM.get(where.split("[")[0], {})}
    try:
        validator.validate_assignment(model.model_construct(**fields), field, value(valid))
    except ValidationError:
        assume(False)  # refused for another reason (e.g. a model name the provider needs)
    with pytest.raises(ValidationError):
        validator.validate_assignment(model.model_construct(**fields), field,
                                      value(valid + "\n"))

