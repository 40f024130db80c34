"""The loader: spec files and folders -> validated, path-resolved ``LoadedSpec`` values.

Reads files and nothing else. Every problem in every file is collected and
raised at once as one ``SpecError`` (each ``FILE:LINE:COL: field.path: message``,
taken from the YAML node of the offending value, or the key for an unknown
key, or the mapping for a missing field). This module never raises anything
else: foreign errors (OSError, ruamel.yaml, pydantic, decoding) are translated
here, at the boundary.

YAML is parsed with ruamel.yaml's safe schema (YAML 1.2; no Python tags),
composed to nodes first so that every value keeps its position, then
constructed to plain Python values for the models in ``reconciler.spec``.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib.util
import json
import os
import re
import typing
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from reconciler.errors import Problem, SpecError
from reconciler.kernel.base.config import Ceilings, LineagePaths, ModelConfig
from reconciler.spec import (
    API_VERSION,
    KIND,
    SET_KIND,
    ForkSpec,
    LineageSetSpec,
    LineageSpec,
    ModelSpec,
    places,
    sets,
    units,
)
from reconciler.spec.files import FileRefused, read_limited
from reconciler.spec.models import RECORDED
from reconciler.spec.probes import ResolvedProbe, resolve
from reconciler.statedir import state_dir  # the rule lives there; re-exported (public API)

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_FILE_BYTES",
    "MAX_FLOW_DEPTH",
    "SPEC_SUFFIXES",
    "LoadedSpec",
    "ParentPlaces",
    "default_places",
    "load_specs",
    "state_dir",
]

SPEC_SUFFIXES = (".yaml", ".yml")
MAX_FILE_BYTES = 1 << 20  # a spec is a page of YAML; beyond this it is a mistake
MAX_FLOW_DEPTH = 64  # ruamel's scanner is quadratic in flow nesting: refuse before parsing
# Aliases and merge keys (<<) may add at most this many nodes to a document beyond those
# written in it: a spec needs little repetition, and a 1 KB file of chained aliases can
# otherwise expand to billions of nodes (minutes of CPU, gigabytes of memory).
MAX_ALIAS_NODES = 10_000
RECORDED_DIR = ".recorded"  # <state dir>/.recorded/NAME: provider recorded's replay folder
_MERGE_TAG = "tag:yaml.org,2002:merge"


# --- the result ---------------------------------------------------------------------


@dataclass(frozen=True)
class ParentPlaces:
    """Where a fork's parent lives, as a spec's lineage does (``state.branches.spec_paths``
    reads it): the places, and the branches its spec names (None: the ones it records)."""

    places: LineagePaths
    declared_branch: str | None = None
    declared_observation_branch: str | None = None

    @property
    def name(self) -> str:
        return self.places.name

    def paths(self) -> LineagePaths:
        return self.places


@dataclass(frozen=True)
class LoadedSpec:
    """One validated lineage spec, with every storage path absolute and defaults filled."""

    spec: LineageSpec
    file: Path
    document_index: int
    line: int
    sha256: str
    # The branches the document names (None: unset). ``paths()`` fills the defaults of a
    # birth; for an existing lineage unset means "its own" (reconciler.state.branches).
    declared_branch: str | None = None
    declared_observation_branch: str | None = None
    # spec.probes with their files read once and their digests (reconciler.spec.probes)
    probes: tuple[ResolvedProbe, ...] = ()
    set_name: str | None = None  # the LineageSet this lineage is a member of
    member: sets.Membership | None = None  # where in its set (cell, replica, matrix values)
    # spec.from's parent: a spec of this run, else <state dir>/NAME (None: not a fork)
    fork_parent: ParentPlaces | None = None
    # provider recorded: the replay folder ouro fills with the source's recorded replies,
    # <state dir>/.recorded/NAME (reconciler.engine.recorded); None for other providers
    recorded_dir: Path | None = None

    @property
    def fork(self) -> ForkSpec | None:
        """``spec.from`` (None: not a fork)."""
        return self.spec.spec.from_

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.spec.metadata.labels)

    @property
    def name(self) -> str:
        return self.spec.metadata.name

    def paths(self) -> LineagePaths:
        storage = self.spec.spec.storage
        assert storage.path and storage.git_dir and storage.observations  # filled by the loader
        assert storage.branch and storage.observation_branch
        return LineagePaths(
            worktree=storage.path,
            git_dir=storage.git_dir,
            observations=storage.observations,
            branch=storage.branch,
            observation_branch=storage.observation_branch,
            name=self.name,
        )

    def model(self) -> ModelConfig:
        """The kernel's model; provider ``recorded`` is the kernel's ``replay`` of the folder
        ouro fills (``recorded_dir``)."""
        model = self.spec.spec.model
        recorded = model.provider == RECORDED
        return ModelConfig(
            provider="replay" if recorded else model.provider,
            name=model.name,
            price=model.resolved_price(),
            base_url=model.base_url,
            api_key_env=model.api_key_env,
            replay_dir=self.recorded_dir if recorded else model.replay,
            max_output_tokens=model.max_output_tokens,
            max_prompt_bytes=model.max_prompt_bytes,
            request_timeout_seconds=model.request_timeout,
            budget_usd=model.budget_usd,
            store=bool(model.store),
        )

    def ceilings(self) -> Ceilings:
        c = self.spec.spec.ceilings
        return Ceilings(
            wall_seconds=c.wall,
            cpu_seconds=c.cpu,
            memory_bytes=c.memory,
            swap_bytes=c.swap,
            tasks=c.tasks,
            worktree_bytes=c.worktree,
            worktree_files=c.worktree_files,
            tmp_bytes=c.tmp,
            run_bytes=c.run,
            enforcement=c.enforcement,
            model_requests=c.model_requests,
            model_audit_bytes=c.model_audit,
        )

    @property
    def instrument_pin(self) -> str | None:
        return self.spec.spec.instrument.commit

    @property
    def where(self) -> str:
        """``FILE:LINE`` of the document, for messages."""
        return f"{self.file}:{self.line}"


_resolve_state_dir = state_dir


def _state_dir_or_none(explicit: Path | None) -> Path | None:
    try:
        return _resolve_state_dir(explicit)
    except (RuntimeError, KeyError, OSError, ValueError):
        return None


# --- reading files ------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    shown: str  # the file as the user named it (what problems print)
    path: Path  # absolute


@dataclass
class _Document:
    source: _Source
    index: int
    node: Node
    spec: LineageSpec
    set_name: str | None = None
    member: sets.Membership | None = None


def _one_line(text: str) -> str:
    """Escape what is not printable (a key may hold a newline): one problem, one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _problem(shown: str, line: int, column: int, field: str, message: str) -> Problem:
    return Problem(file=_one_line(shown), line=max(1, line), column=max(1, column),
                   field=_one_line(field), message=_one_line(message))


def _collect(paths: Sequence[Path], problems: list[Problem]) -> list[_Source]:
    """Files named, and every *.yaml/*.yml below folders named (sorted; hidden names skipped)."""
    sources: list[_Source] = []
    seen: set[str] = set()

    def add(shown: Path) -> None:
        absolute = Path(os.path.abspath(shown))
        key = os.path.realpath(absolute)
        if key not in seen:
            seen.add(key)
            sources.append(_Source(str(shown), absolute))

    for given in paths:
        given = Path(given)
        try:
            if given.is_dir():
                found: list[Path] = []
                for root, dirs, files in os.walk(given, followlinks=False):
                    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                    found.extend(
                        Path(root) / name
                        for name in files
                        if name.endswith(SPEC_SUFFIXES)
                        and not name.startswith(".")
                        and (Path(root) / name).is_file()
                    )
                if not found:
                    problems.append(_problem(str(given), 1, 1, "",
                                             "no *.yaml or *.yml spec files in this folder"))
                for path in sorted(found):
                    add(path)
            elif given.exists():
                add(given)
            else:
                problems.append(_problem(str(given), 1, 1, "", "no such file or folder"))
        except (OSError, ValueError) as error:
            problems.append(_problem(str(given), 1, 1, "", f"cannot read: {error}"))
    return sources


def _read_text(source: _Source, problems: list[Problem]) -> str | None:
    try:
        data = read_limited(source.path, MAX_FILE_BYTES, "a spec file")
    except FileRefused as error:
        problems.append(_problem(source.shown, 1, 1, "", str(error)))
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        problems.append(_problem(
            source.shown, line, column, "",
            f"not UTF-8 text: byte 0x{data[error.start]:02x} cannot be decoded "
            "(specs are UTF-8)",
        ))
        return None
    return text.removeprefix("\ufeff")


def _flow_too_deep(text: str) -> tuple[int, int] | None:
    """Where ``[``/``{`` nesting first exceeds MAX_FLOW_DEPTH (quotes and comments skipped).

    An approximation of YAML's lexing that only ever errs towards parsing: the
    parser itself reports everything else.
    """
    depth, quote, comment, previous = 0, "", False, "\n"
    line, column = 1, 0
    for char in text:
        column += 1
        if char == "\n":
            line, column, comment, previous = line + 1, 0, False, char
            continue  # quoted scalars may span lines: keep `quote`
        if comment:
            continue
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"" and previous in " \t\n[{,:":
            quote = char
        elif char == "#" and previous in " \t\n":
            comment = True
        elif char in "[{":
            depth += 1
            if depth > MAX_FLOW_DEPTH:
                return line, column
        elif char in "]}":
            depth = max(0, depth - 1)
        previous = char
    return None


def _position_of_offset(text: str, offset: int) -> tuple[int, int]:
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _yaml_problem(source: _Source, text: str, error: Exception) -> Problem:
    if isinstance(error, MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        what = "; ".join(str(part) for part in (error.context, error.problem) if part)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        return _problem(source.shown, line, column, "", f"YAML syntax error: {what or error}")
    if isinstance(error, ReaderError):
        line, column = _position_of_offset(text, error.position)
        character = error.character
        shown = repr(chr(character) if isinstance(character, int) else character)
        return _problem(source.shown, line, column, "",
                        f"YAML cannot contain character {shown} "
                        "(control characters are not allowed)")
    if isinstance(error, RecursionError):
        return _problem(source.shown, 1, 1, "", "YAML nested too deeply to read")
    if isinstance(error, YAMLError):
        return _problem(source.shown, 1, 1, "", f"YAML error: {error}")
    return _problem(source.shown, 1, 1, "",
                    f"YAML cannot be read ({type(error).__name__}: {error})")


def _mark(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _alias_expansion(root: Node) -> tuple[Node, str] | None:
    """Where a document's aliases expand beyond MAX_ALIAS_NODES, or refer to themselves.

    An alias is the very node it names, so the composed document is a graph; its
    expansion (what constructing and validating it would walk) counts a node once per
    path to it. Counted in one memoised post-order pass, linear in the distinct nodes.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                return node, "an alias refers to a node that contains it (a cycle)"
            if id(child) not in sizes:
                stack.append((child, False))
    if sizes[id(root)] <= len(sizes) + MAX_ALIAS_NODES:
        return None
    blamed = root  # the deepest node whose expansion alone is too large
    while True:
        biggest = max(_children(blamed), key=lambda child: sizes[id(child)], default=None)
        if biggest is None or sizes[id(biggest)] <= MAX_ALIAS_NODES:
            break
        blamed = biggest
    return blamed, (
        f"aliases and merge keys (<<) expand this document to {sizes[id(root)]} nodes, "
        f"more than {MAX_ALIAS_NODES} beyond the {len(sizes)} written: write the "
        "values out instead of repeating anchors"
    )


def _duplicate_keys(source: _Source, root: Node, problems: list[Problem]) -> None:
    """Duplicate keys in any mapping (YAML forbids them; a silent overwrite hides a typo)."""
    visited: set[int] = set()
    stack: list[tuple[Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, MappingNode):
            first: dict[str, Node] = {}
            for key, value in node.value:
                if isinstance(key, ScalarNode) and key.tag != _MERGE_TAG:
                    name = str(key.value)
                    field = f"{path}.{name}" if path else name
                    if name in first:
                        line, column = _mark(first[name])
                        problems.append(_problem(
                            source.shown, *_mark(key), field,
                            f"duplicate key (first at line {line}, column {column})",
                        ))
                    else:
                        first[name] = key
                    stack.append((value, field))
                else:
                    stack.append((value, path))
        elif isinstance(node, SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))


def _documents(source: _Source, text: str, problems: list[Problem]) -> list[
    tuple[int, Node, Any]
]:
    """(index, node, plain value) for every non-empty document of one file.

    libyaml (ruamel.yaml.clib, when installed) reads a good file several times faster
    than the pure-Python parser; a file with any problem is read again by the latter,
    whose messages and positions are the ones ouro reports.
    """
    deep = _flow_too_deep(text)
    if deep is not None:
        problems.append(_problem(source.shown, *deep, "",
                                 f"nested more than {MAX_FLOW_DEPTH} levels deep"))
        return []
    if _HAVE_LIBYAML:
        fast: list[Problem] = []
        found = _read_documents(source, text, fast, pure=False)
        if not fast:
            return found
    return _read_documents(source, text, problems, pure=True)


def _read_documents(source: _Source, text: str, problems: list[Problem], *,
                    pure: bool) -> list[tuple[int, Node, Any]]:
    found: list[tuple[int, Node, Any]] = []
    yaml = YAML(typ="safe", pure=pure)
    yaml.allow_duplicate_keys = True  # reported by _duplicate_keys, with both positions
    count = 0
    nodes = yaml.compose_all(text)
    index = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while True:
            try:
                node = next(nodes)
            except StopIteration:
                break
            except Exception as error:  # ruamel raises more than YAMLError on odd input
                problems.append(_yaml_problem(source, text, error))
                return found
            index += 1
            if node is None or (isinstance(node, ScalarNode)
                                and str(node.tag).endswith(":null")
                                and node.value in ("", "~", "null", "Null", "NULL")):
                continue  # an empty document: `---` with nothing after it
            count += 1
            blown = _alias_expansion(node)
            if blown is not None:
                problems.append(_problem(source.shown, *_mark(blown[0]), "", blown[1]))
                continue
            _duplicate_keys(source, node, problems)
            try:
                value = yaml.constructor.construct_document(node)
            except Exception as error:
                problems.append(_yaml_problem(source, text, error))
                continue
            found.append((index - 1, node, value))
    if count == 0:
        problems.append(_problem(source.shown, 1, 1, "",
                                 "empty: no spec document in this file"))
    return found


# The C extension of ruamel.yaml.clib; without it every file takes the pure-Python path.
_HAVE_LIBYAML = importlib.util.find_spec("_ruamel_yaml") is not None


# --- positions and messages --------------------------------------------------------


def _locate_node(node: Node, loc: Sequence[Any], *, key: bool) -> Node:
    """The node of ``loc`` under ``node``: its key or value, else the nearest mapping."""
    current = node
    for depth, part in enumerate(loc):
        last = depth == len(loc) - 1
        if isinstance(current, MappingNode):
            pair = _find_pair(current, str(part))
            if pair is None:
                return current
            current = pair[0] if (last and key) else pair[1]
        elif isinstance(current, SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(current.value):
                return current
            current = current.value[part]
        else:
            return current
    return current


def _locate(node: Node, loc: Sequence[Any], *, key: bool) -> tuple[int, int]:
    return _mark(_locate_node(node, loc, key=key))


def _find_pair(mapping: MappingNode, name: str) -> tuple[Node, Node] | None:
    merged: list[Node] = []
    for key, value in mapping.value:
        if isinstance(key, ScalarNode):
            if key.tag == _MERGE_TAG:
                merged.extend(value.value if isinstance(value, SequenceNode) else [value])
            elif str(key.value) == name:
                return key, value
    for other in merged:
        if isinstance(other, MappingNode):
            found = _find_pair(other, name)
            if found is not None:
                return found
    return None


def _dotted(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc)  # a spec has no lists: every part is a key


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


def _message(error: Any, node: Node, root: type[BaseModel] = LineageSpec) -> str:
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
    if kind == "string_type" and isinstance(given, int | float | bool):
        return f"must be a string, not {units.describe(given)}: quote it"
    return f"{message[:1].lower()}{message[1:]} (got {units.describe(given)})"


# --- validation ---------------------------------------------------------------------


def _validate(source: _Source, index: int, node: Node, value: Any,
              problems: list[Problem]) -> list[_Document]:
    shown = source.shown
    if not isinstance(value, dict):
        problems.append(_problem(
            shown, *_mark(node), "",
            "a spec document is a mapping with apiVersion, kind, metadata and spec, not "
            f"{units.describe(value)}",
        ))
        return []
    header_problems = len(problems)
    kinds = (KIND, SET_KIND)
    for field, expected in (("apiVersion", (API_VERSION,)), ("kind", kinds)):
        wanted = " or ".join(expected)
        if field not in value:
            problems.append(_problem(shown, *_mark(node), field,
                                     f"required, but missing (this file must say {field}: "
                                     f"{wanted})"))
        elif value[field] not in expected:
            problems.append(_problem(shown, *_locate(node, (field,), key=False), field,
                                     f"must be {wanted}, not {units.describe(value[field])}"))
    if len(problems) > header_problems:
        return []  # not an ouro spec: its other fields would only be noise
    if value["kind"] == SET_KIND:
        return _validate_set(source, index, node, value, problems)
    spec = _validated(LineageSpec, source, node, value, problems, _plain_place)
    return [] if spec is None else [_Document(source, index, node, spec)]


def _plain_place(node: Node, loc: Sequence[Any], key: bool) -> tuple[Node, str, str]:
    return _locate_node(node, loc, key=key), _dotted(loc), ""


_Place = typing.Callable[[Node, Sequence[Any], bool], tuple[Node, str, str]]
_Model = typing.TypeVar("_Model", bound=BaseModel)


def _validated(model: type[_Model], source: _Source, node: Node, value: Any,
               problems: list[Problem], place: _Place) -> _Model | None:
    """``model`` from ``value``, or None with each problem where ``place`` puts it
    (the node, the field shown and a prefix for the message)."""
    try:
        return model.model_validate(value, context={"base_dir": source.path.parent})
    except ValidationError as error:
        for detail in error.errors(include_url=False):
            loc = detail["loc"]
            key = detail["type"] in ("extra_forbidden", "invalid_key")
            found, field, prefix = place(node, loc, key)
            problems.append(_problem(source.shown, *_mark(found), field,
                                     prefix + _message(detail, found, model)))
    except Exception as error:  # a bug in a validator must still not be a traceback
        problems.append(_problem(
            source.shown, *_mark(node), "",
            f"internal error while validating ({type(error).__name__}: {error}); "
            "this is a bug in ouro",
        ))
    return None


# --- sets ---------------------------------------------------------------------------

_MATRIX_KEY = re.compile(r"^[a-z_]+(\.[a-z_]+)*$")
_OWN_PLACES = ("path", "git_dir", "observations", "branch", "observation_branch")


def _set_problems(spec: LineageSetSpec, node: Node) -> list[tuple[Node, str, str]]:
    """What a set may not say, beyond its model: (node, field, message)."""
    found: list[tuple[Node, str, str]] = []
    body = spec.spec
    problem = sets.name_problem(spec.name, bool(body.matrix))
    if problem:
        found.append((_locate_node(node, ("metadata", "name"), key=False),
                      "metadata.name", problem))
    for key, values in body.matrix.items():
        where = _locate_node(node, ("spec", "matrix", key), key=True)
        field = f"spec.matrix.{key}"
        if not _MATRIX_KEY.match(key):
            found.append((where, field, "a matrix key is a spec field path of lowercase "
                          "names joined by '.' (e.g. model, ceilings.wall)"))
        elif key.split(".")[0] == "storage":
            found.append((where, field, "a member's storage is its own (<state dir>/<member>): "
                          "the matrix cannot set it"))
        if not values:
            found.append((where, field, "an empty list makes no cells: give at least one value"))
        digests: dict[str, int] = {}
        for i, value in enumerate(values):
            seen = digests.setdefault(sets.slug([value]) + repr(value), i)
            if seen != i:
                found.append((_locate_node(node, ("spec", "matrix", key, i), key=False),
                              f"{field}[{i}]", f"repeats {field}[{seen}]: each value once"))
    storage = body.template.get("storage")
    for name in _OWN_PLACES:
        if isinstance(storage, dict) and name in storage:
            found.append((_locate_node(node, ("spec", "template", "storage", name), key=True),
                          f"spec.template.storage.{name}",
                          "a member's storage is its own (<state dir>/<member>, branch "
                          "lineage-<member>): remove it from the template"))
    return found


def _member_place(cell: sets.Cell, member: str) -> _Place:
    """Where a member's problem is written: at the matrix value that made it, else in
    the template; the message names the member."""
    def place(node: Node, loc: Sequence[Any], key: bool) -> tuple[Node, str, str]:
        prefix = f"member {member}: "
        if not loc or loc[0] != "spec":
            return _locate_node(node, ("metadata",), key=False), "metadata", prefix
        rest = list(loc[1:])
        for name, index in cell.where.items():
            parts = name.split(".")
            if [str(p) for p in rest[:len(parts)]] == parts:
                inner = rest[len(parts):]
                at = ("spec", "matrix", name, index, *inner)
                shown = f"spec.matrix.{name}[{index}]" + "".join(f".{p}" for p in inner)
                return _locate_node(node, at, key=key), shown, prefix
        return (_locate_node(node, ("spec", "template", *rest), key=key),
                _dotted(("spec", "template", *rest)), prefix)
    return place


def _set_place(node: Node, loc: Sequence[Any], key: bool) -> tuple[Node, str, str]:
    return _locate_node(node, loc, key=key), _dotted(loc), ""


def _validate_set(source: _Source, index: int, node: Node, value: Any,
                  problems: list[Problem]) -> list[_Document]:
    """A LineageSet's members, each validated as the Lineage it is (one per cell: its
    replicas differ only in name and labels)."""
    spec = _validated(LineageSetSpec, source, node, value, problems, _set_place)
    if spec is None:
        return []
    own = _set_problems(spec, node)
    for where, field, message in own:
        problems.append(_problem(source.shown, *_mark(where), field, message))
    if own:
        return []
    members: list[_Document] = []
    labels = spec.metadata.labels
    template_problems: set[tuple[int, int, str, str]] = set()  # said once, not per cell
    for cell in sets.cells(spec.name, spec.spec.matrix):
        first = sets.member_document(spec.api_version, labels, spec.name,
                                     spec.spec.template, cell, 0)
        found: list[Problem] = []
        member = _validated(LineageSpec, source, node, first, found,
                            _member_place(cell, first["metadata"]["name"]))
        for problem in found:
            said = problem.message.split(": ", 1)[-1]
            if problem.field.startswith("spec.template"):
                if (problem.line, problem.column, problem.field, said) in template_problems:
                    continue
                template_problems.add((problem.line, problem.column, problem.field, said))
            problems.append(problem)
        if member is None:
            continue
        cell_labels = cell.labels()
        for i in range(spec.spec.replicas):
            metadata = member.metadata.model_copy(
                update=sets.member_metadata(labels, spec.name, cell.name, cell_labels, i))
            members.append(_Document(source, index, node,
                                     member.model_copy(update={"metadata": metadata}),
                                     set_name=spec.name,
                                     member=sets.Membership(spec.name, cell.name, i,
                                                            dict(cell.values))))
    return members


def _absolute(base: Path, path: Path) -> Path:
    return Path(os.path.abspath(base / path))


def default_places(path: Path, name: str) -> LineagePaths:
    """The places and branches of lineage ``name`` at ``path`` when a spec names no others."""
    branch = f"lineage-{name}"
    return LineagePaths(
        worktree=path,
        git_dir=Path(f"{path}.git"),  # "/" has no name to change: "/.git", refused later
        observations=Path(f"{path}.observations"),
        branch=branch,
        observation_branch=f"observations/{branch}",
        name=name,
    )


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class _Shared:
    """What one load makes once for all the documents that share it: a set's replicas share
    their ``spec`` section (one object per cell), so its canonical text and its model with
    the replay folder resolved are made once per cell. Keyed by the object's id and kept
    with it (so alive while the load runs: an id is never another object's)."""

    def __init__(self) -> None:
        self._texts: dict[int, tuple[object, str]] = {}
        self._models: dict[tuple[int, Path], tuple[object, ModelSpec]] = {}

    def canonical(self, spec: LineageSpec) -> str:
        """``spec``'s canonical text, exactly ``_canonical_json(spec.model_dump(mode="json",
        by_alias=True))`` (the spec's sha256 is of it: saved plans, every observation)."""
        body = spec.spec
        found = self._texts.get(id(body))
        if found is None:
            text = _canonical_json(body.model_dump(mode="json", by_alias=True))
            found = self._texts[id(body)] = (body, text)
        texts = {key: _canonical_json(value) for key, value in
                 spec.model_dump(mode="json", by_alias=True, exclude={"spec"}).items()}
        texts["spec"] = found[1]
        return "{" + ",".join(f"{_canonical_json(key)}:{texts[key]}"
                              for key in sorted(texts)) + "}"

    def model(self, model: ModelSpec, base: Path) -> ModelSpec:
        """``model`` with its replay folder absolute (from ``base``, the spec's folder)."""
        found = self._models.get((id(model), base))
        if found is None:
            resolved = model.model_copy(
                update={"replay": _absolute(base, model.replay) if model.replay else None})
            found = self._models[(id(model), base)] = (model, resolved)
        return found[1]


def _resolve(document: _Document, default_dir: Path, shared: _Shared) -> LoadedSpec:
    spec = document.spec
    base = document.source.path.parent
    storage, model = spec.spec.storage, spec.spec.model
    path = _absolute(base, storage.path) if storage.path else default_dir / spec.name
    defaults = default_places(path, spec.name)
    branch = storage.branch or defaults.branch
    resolved_storage = storage.model_copy(update={
        "path": path,
        "git_dir": _absolute(base, storage.git_dir) if storage.git_dir else defaults.git_dir,
        "observations": _absolute(base, storage.observations) if storage.observations
        else defaults.observations,
        "branch": branch,
        "observation_branch": storage.observation_branch or f"observations/{branch}",
    })
    return LoadedSpec(
        spec=spec.model_copy(update={"spec": spec.spec.model_copy(
            update={"storage": resolved_storage, "model": shared.model(model, base)})}),
        file=document.source.path,
        document_index=document.index,
        line=_mark(document.node)[0],
        sha256=hashlib.sha256(shared.canonical(spec).encode("utf-8")).hexdigest(),
        declared_branch=storage.branch,
        declared_observation_branch=storage.observation_branch,
        probes=_probes(document),
        set_name=document.set_name,
        member=document.member,
        recorded_dir=(default_dir / RECORDED_DIR / spec.name if model.provider == RECORDED
                      else None),
    )


def _probes(document: _Document) -> tuple[ResolvedProbe, ...]:
    """The spec's probes, files read (they were checked moments ago, at validation)."""
    try:
        return tuple(resolve(probe) for probe in document.spec.spec.probes)
    except ValueError as error:
        line, column = _mark(document.node)
        raise SpecError([_problem(document.source.shown, line, column, "spec.probes",
                                  f"{error}; run again once the probe's files are back")]
                        ) from None


def _member_of(document: _Document) -> str:
    """How a problem of a set's member begins: the member and its set ('' for a Lineage)."""
    if document.set_name is None:
        return ""
    return f"member {document.spec.name} of set {document.set_name}: "


def _check_unique(documents: list[_Document], loaded: list[LoadedSpec],
                  problems: list[Problem]) -> None:
    """Names are unique in a run; no two lineages (or one lineage's places) share a place."""
    names: dict[str, tuple[_Document, tuple[int, int]]] = {}
    places: dict[Path, tuple[str, str]] = {}
    named_at: dict[int, tuple[int, int]] = {}  # by node: a set's members share their set's
    for document, spec in zip(documents, loaded, strict=True):
        where = named_at.get(id(document.node))
        if where is None:
            where = named_at[id(document.node)] = _locate(document.node, ("metadata", "name"),
                                                          key=False)
        if spec.name in names:
            first, (line, column) = names[spec.name]
            problems.append(_problem(
                document.source.shown, *where, "metadata.name",
                f"{_member_of(document)}lineage {spec.name!r} is already defined at "
                f"{first.source.shown}:{line}:{column}; names must be unique",
            ))
            continue
        names[spec.name] = (document, where)
        paths = spec.paths()
        for field, place in (("path", paths.worktree), ("git_dir", paths.git_dir),
                             ("observations", paths.observations)):
            owner = f"{document.source.shown}:{where[0]}:{where[1]}"
            if place in places:
                other_name, other_owner = places[place]
                other = "its own storage" if other_name == spec.name else (
                    f"lineage {other_name!r} ({other_owner})")
                problems.append(_problem(
                    document.source.shown,
                    *_locate(document.node, ("spec", "storage", field), key=False),
                    f"spec.storage.{field}",
                    f"{_member_of(document)}{place} is already used by {other}",
                ))
            else:
                places[place] = (spec.name, owner)


# Kernel pseudo-filesystems: a lineage's places there would be the host's own state.
PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))
_FIELDS = ("path", "git_dir", "observations")
_PLACE_NAMES = {"path": "worktree", "git_dir": "git dir", "observations": "observations"}


def _pseudo_problem(place: Path, resolved: Path) -> str | None:
    pseudo = next((root for root in PSEUDO_FILESYSTEMS
                   if place.is_relative_to(root) or resolved.is_relative_to(root)), None)
    if pseudo is None:
        return None
    return (f"{place} is under {pseudo}, a kernel pseudo-filesystem: a lineage's places "
            "must be on a real filesystem; choose another path (or state dir)")


def _nested_in_run(place: Path, real: Path, own: str,
                   named: dict[str, tuple[Path, str, str]]) -> str | None:
    """Why ``place`` lies inside a place another spec of this run names (None: it does not).

    ``named`` maps each place of the run, as written and resolved, to (the place, its
    lineage, its field); the folders ``place`` lies in are looked up there: linear in
    the places, never pairwise (a fleet of thousands loads in a moment).
    """
    for folder in places.ancestors(str(place), str(real)):
        found = named.get(folder)
        if found is None or found[1] == own:
            continue  # a git dir inside its own worktree is git's ordinary layout
        other, name, other_field = found
        return (f"{place} is inside {other}, lineage {name!r}'s "
                f"{_PLACE_NAMES[other_field]}: a lineage inside another would be "
                "committed into it (an external edit) or read as its history; choose a "
                "path outside it")
    return None


def _check_places(documents: list[_Document], loaded: list[LoadedSpec],
                  problems: list[Problem], state: Path | None) -> None:
    """Each place of each lineage is one it may live in (``reconciler.spec.places``).

    Linear in the places: each parent folder is resolved and judged once
    (``places.Folders``), and only a place it cannot clear is checked in full."""
    named: dict[str, tuple[Path, str, str]] = {}  # filled below, before it is asked
    seen: dict[str, str | None] = {}
    reserved = places.reserved_folders(state)
    folders = places.Folders((*PSEUDO_FILESYSTEMS, *places.SYSTEM_FOLDERS,
                              *(folder for folder, _ in reserved),
                              *places.python_path_folders()), named, seen)
    resolved = [[(place, folders.realpath(str(place))) for place in _places(spec)]
                for spec in loaded]
    for spec, pairs in zip(loaded, resolved, strict=True):
        for field, (place, real) in zip(_FIELDS, pairs, strict=True):
            for key in (str(place), real):
                named.setdefault(key, (place, spec.name, field))
    for document, spec, pairs in zip(documents, loaded, resolved, strict=True):
        if all(folders.clear(str(place)) and (real == str(place) or folders.clear(real))
               for place, real in pairs):
            continue
        own = {str(path) for pair in pairs for path in pair}
        for field, (place, text) in zip(_FIELDS, pairs, strict=True):
            reached = Path(text)
            problem = (_pseudo_problem(place, reached)
                       or places.system_problem(place, reached)
                       or places.reserved_problem(place, reserved, reached)
                       or _nested_in_run(place, reached, spec.name, named)
                       or places.inside_a_lineage(place, reached, own, seen))
            if problem is not None:
                problems.append(_problem(
                    document.source.shown,
                    *_locate(document.node, ("spec", "storage", field), key=False),
                    f"spec.storage.{field}", _member_of(document) + problem))


def _fork_problem(spec: LoadedSpec, by_name: dict[str, LoadedSpec]) -> tuple[str, str] | None:
    """What is wrong with a fork's ``spec.from`` that no plan can change: (field, message)."""
    fork = spec.fork
    if fork is None:
        return None
    if fork.lineage == spec.name:
        return "lineage", "a lineage cannot fork itself: name another lineage"
    if fork.kernel == "parent" and spec.instrument_pin:
        return "kernel", ("kernel: parent births the fork under the parent's kernel, and "
                          "spec.instrument.commit pins another: keep one of the two")
    seen, parent = {spec.name}, by_name.get(fork.lineage)
    while parent is not None and parent.fork is not None:  # a cycle is never born
        if parent.name in seen or parent.fork.lineage in seen:
            return "lineage", (f"forks in a circle ({spec.name} -> {fork.lineage} -> ... -> "
                               f"{spec.name}): one of them must start from a lineage that "
                               "is not a fork of the others")
        seen.add(parent.name)
        parent = by_name.get(parent.fork.lineage)
    return None


def _with_parents(documents: list[_Document], loaded: list[LoadedSpec],
                  problems: list[Problem], state_dir: Path | None) -> list[LoadedSpec]:
    """Each fork with its parent's places: the run's spec of that name, else the state
    dir's default places of that name (branches as the lineage records them)."""
    by_name = {spec.name: spec for spec in loaded}
    result: list[LoadedSpec] = []
    for document, spec in zip(documents, loaded, strict=True):
        fork = spec.fork
        if fork is None:
            result.append(spec)
            continue
        found = _fork_problem(spec, by_name)
        if found is not None:
            problems.append(_problem(
                document.source.shown,
                *_locate(document.node, ("spec", "from", found[0]), key=False),
                f"spec.from.{found[0]}", _member_of(document) + found[1]))
        sibling = by_name.get(fork.lineage)
        if sibling is not None:
            parent = ParentPlaces(sibling.paths(), sibling.declared_branch,
                                  sibling.declared_observation_branch)
        else:
            home = _state_dir_or_none(state_dir)
            if home is None:
                problems.append(_problem(
                    document.source.shown,
                    *_locate(document.node, ("spec", "from", "lineage"), key=False),
                    "spec.from.lineage", _member_of(document) + "the parent is not a spec "
                    "of this run and the state dir cannot be found: name the parent's spec "
                    "too, or set --state-dir or OURO_STATE_DIR"))
                result.append(spec)
                continue
            parent = ParentPlaces(default_places(home / fork.lineage, fork.lineage))
        result.append(dataclasses.replace(spec, fork_parent=parent))
    return result


def _places(spec: LoadedSpec) -> tuple[Path, Path, Path]:
    paths = spec.paths()
    return paths.worktree, paths.git_dir, paths.observations


def load_specs(paths: Sequence[Path], *, state_dir: Path | None = None) -> list[LoadedSpec]:
    """Load, validate and resolve every spec under ``paths``; all problems or none.

    Raises ``SpecError`` listing every problem (``FILE:LINE:COL: field: message``).
    """
    problems: list[Problem] = []
    documents: list[_Document] = []
    if not paths:
        raise SpecError([_problem("-", 1, 1, "", "no spec file or folder given")])
    places.ask_python_paths()  # (answered while the specs are parsed: _check_places)
    sources = _collect(paths, problems)
    for source in sources:
        text = _read_text(source, problems)
        if text is None:
            continue
        for index, node, value in _documents(source, text, problems):
            documents.extend(_validate(source, index, node, value, problems))
    loaded: list[LoadedSpec] = []
    default_dir: Path | None = None
    shared = _Shared()
    for document in documents:
        if document.spec.spec.storage.path is None and default_dir is None:
            try:
                default_dir = _resolve_state_dir(state_dir)
            except (RuntimeError, KeyError, OSError, ValueError) as error:
                problems.append(_problem(
                    document.source.shown,
                    *_locate(document.node, ("spec", "storage", "path"), key=False),
                    "spec.storage.path",
                    f"no default: the state dir cannot be found ({error}); set "
                    "spec.storage.path, --state-dir or OURO_STATE_DIR",
                ))
                continue
        loaded.append(_resolve(document, default_dir or Path("/"), shared))
    if len(loaded) != len(documents):
        documents = [d for d in documents if d.spec.spec.storage.path is not None]
    _check_unique(documents, loaded, problems)
    _check_places(documents, loaded, problems, default_dir or _state_dir_or_none(state_dir))
    loaded = _with_parents(documents, loaded, problems, state_dir)
    if problems:
        files = dict.fromkeys([*(s.shown for s in sources), *(p.file for p in problems)])
        order = {shown: rank for rank, shown in enumerate(files)}
        unique = dict.fromkeys(problems)  # the same problem found twice is one problem
        raise SpecError(sorted(unique, key=lambda p: (order[p.file], p.line, p.column)))
    return loaded
