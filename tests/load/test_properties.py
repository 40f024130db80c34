"""Property tests: whatever the bytes, the loader answers with specs or a SpecError.

Never another exception, never an "internal error" problem, and every problem
names the file and a real position.
"""

from __future__ import annotations

import copy
import io
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from reconciler.errors import SpecError
from reconciler.spec.load import LoadedSpec, load_specs

SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

VALID: dict[str, Any] = {
    "apiVersion": "ouro/v1",
    "kind": "Lineage",
    "metadata": {"name": "prop", "labels": {"team": "evo"}},
    "spec": {
        "generations": 3,
        "model": {
            "provider": "openai",
            "name": "gpt-5.6",
            "api_key_env": "OPENAI_API_KEY",
            "max_output_tokens": 12000,
            "max_prompt_bytes": "192KiB",
            "request_timeout": "10m",
            "budget_usd": "1.00",
            "price": {"input_usd_per_mtok": "5", "output_usd_per_mtok": "30"},
        },
        "ceilings": {
            "wall": "600s", "cpu": 120, "memory": "1GiB", "swap": 0, "tasks": 64,
            "worktree": "256MiB", "worktree_files": 10000, "tmp": "64M", "run": "16M",
            "enforcement": "auto",
        },
        "storage": {
            "path": "lineages/prop", "git_dir": None, "observations": None,
            "branch": None, "observation_branch": None,
        },
        "instrument": {"commit": None},
    },
}


def _field_paths(value: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from _field_paths(inner, (*prefix, key))


FIELD_PATHS = sorted(_field_paths(VALID))

_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), _text,
    st.sampled_from(["1G", "1GB", "0", "-1", "10m", "1h30m", "1.5", "anthropic", "echo",
                     "replay", "openai-compatible", "http://127.0.0.1:1/v1", ".", "..", "~",
                     "a..b", "@{", "HEAD", "x.lock", "a" * 300, "ouro/v1", "Lineage"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_text, inner, max_size=4)),
    max_leaves=10,
)


def _dump(document: Any) -> str:
    stream = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.dump(document, stream)
    return stream.getvalue()


def _load(content: bytes | str, name: str = "spec.yaml") -> list[LoadedSpec] | SpecError:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        try:
            loaded = load_specs([path], state_dir=Path(folder) / "state")
        except SpecError as error:
            for problem in error.problems:
                assert problem.file == str(path)
                assert problem.line >= 1 and problem.column >= 1
                assert "internal error" not in problem.message, problem
                assert str(problem).startswith(f"{path}:")
                assert str(problem).isprintable(), problem  # one problem, one line
            assert error.problems
            return error
        for spec in loaded:  # a valid spec must also convert to the kernel's values
            spec.paths(), spec.model(), spec.ceilings()
        return loaded


@SETTINGS
@given(st.binary(max_size=600))
def test_random_bytes(content: bytes) -> None:
    _load(content)


@SETTINGS
@given(st.text(max_size=600))
def test_random_text(content: str) -> None:
    _load(content)


YAML_TOKENS = [
    "apiVersion: ouro/v1\n", "kind: Lineage\n", "metadata:\n", "  name: x\n", "spec:\n",
    "  generations: 1\n", "  model:\n", "    provider: echo\n", "---\n", "...\n", "- ", ": ",
    "{", "}", "[", "]", ",", "&a ", "*a", "<<: ", "!!str ", "!tag ", "? ", "|\n", ">-\n", "'",
    '"', "#", "\t", "  ", "\n", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "~", "null", "1e9",
    "0x1F", "0o17", ".inf", "2026-01-01", "\\", "\x00", "\u2028", "\ufeff",
]


@SETTINGS
@given(st.lists(st.sampled_from(YAML_TOKENS), max_size=60).map("".join))
def test_yaml_token_soup(content: str) -> None:
    _load(content)


@SETTINGS
@given(st.sampled_from(FIELD_PATHS), values)
def test_any_value_in_any_field(path: tuple[str, ...], value: Any) -> None:
    document = copy.deepcopy(VALID)
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    _load(_dump(document))


def _get(document: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


MAPPING_PATHS = [()] + [
    p for p in FIELD_PATHS if isinstance(_get(VALID, p), dict) and p != ("metadata", "labels")
]


@SETTINGS
@given(st.sampled_from(MAPPING_PATHS), _text, values)
def test_any_unknown_key_anywhere_is_an_error(path: tuple[str, ...], key: str, value: Any) -> None:
    document = copy.deepcopy(VALID)
    target = _get(document, path)
    if key in target or key == "<<":
        return  # not unknown
    target[key] = value
    text = _dump(document)
    try:
        reread = YAML(typ="safe", pure=True).load(text)
    except Exception:  # ruamel's dumper can write what its parser refuses ('{:0: null}')
        reread = None
    assume(reread == document)  # the dumper kept the key
    result = _load(text)
    assert isinstance(result, SpecError)
    dotted = "".join(c if c.isprintable() else repr(c)[1:-1] for c in ".".join((*path, key)))
    assert any(
        p.field == dotted and p.message.startswith("unknown field") for p in result.problems
    ), result.problems


@SETTINGS
@given(st.lists(st.sampled_from(FIELD_PATHS), max_size=6, unique=True))
def test_removing_fields(paths: list[tuple[str, ...]]) -> None:
    document = copy.deepcopy(VALID)
    for path in sorted(paths, key=len, reverse=True):
        target: Any = document
        for key in path[:-1]:
            target = target.get(key) if isinstance(target, dict) else None
        if isinstance(target, dict):
            target.pop(path[-1], None)
    _load(_dump(document))


def test_the_valid_document_is_valid() -> None:
    loaded = _load(_dump(VALID))
    assert isinstance(loaded, list) and loaded[0].name == "prop"
