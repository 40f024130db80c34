"""A spec file's text to YAML documents: composed nodes (every value keeps its position)
and their plain values, the text taken as hostile.

Parsed with ruamel.yaml's safe schema (YAML 1.2; no Python tags). Refused before
or while parsing, each at ``FILE:LINE:COL``: flow nesting deeper than
``MAX_FLOW_DEPTH`` (ruamel's scanner is quadratic in it), aliases that expand
beyond ``MAX_ALIAS_NODES`` or refer to themselves, duplicate keys, and what the
parser itself refuses -- named by its kind and place, never by quoting the text.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from reconciler.errors import Problem
from reconciler.spec.positions import MERGE_TAG, children, mark, problem
from reconciler.spec.sources import Source

__all__ = ["HAVE_LIBYAML", "MAX_ALIAS_NODES", "MAX_FLOW_DEPTH", "Parsed", "documents"]

MAX_FLOW_DEPTH = 64  # ruamel's scanner is quadratic in flow nesting: refuse before parsing
# Aliases and merge keys (<<) may add at most this many nodes to a document beyond those
# written in it: a spec needs little repetition, and a 1 KB file of chained aliases can
# otherwise expand to billions of nodes (minutes of CPU, gigabytes of memory).
MAX_ALIAS_NODES = 10_000
# The C extension of ruamel.yaml.clib; without it every file takes the pure-Python path.
HAVE_LIBYAML = importlib.util.find_spec("_ruamel_yaml") is not None


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


# What ruamel's messages quote of the text: an alias, a tag, a character, a token
# ('x', "x"). Kept: its token names ('<block end>') and one punctuation or white-space
# character (',', ']', '\t'), the grammar's own words; nothing else of the text.
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_GRAMMAR = re.compile(r"'(<[a-z ]+>|[^\w\s'\\]|\\[a-z])'")


def _kind_only(text: object) -> str:
    """ruamel's wording of a problem with every quote of the file's text removed."""
    kept = _QUOTED.sub(lambda m: m.group(0) if _GRAMMAR.fullmatch(m.group(0)) else "",
                       str(text))
    return " ".join(kept.split())


def _yaml_problem(source: Source, text: str, error: Exception) -> Problem:
    """The parser's problem: its place and its kind, never the file's text (ruamel's own
    message quotes the line and what it found there, and the file may be anything)."""
    if isinstance(error, MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        what = "; ".join(_kind_only(part) for part in (error.context, error.problem) if part)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        return problem(source.shown, line, column, "",
                       f"YAML syntax error: {what or type(error).__name__}")
    if isinstance(error, ReaderError):  # a control character: shown escaped, as one
        line, column = _position_of_offset(text, error.position)
        character = error.character
        shown = repr(chr(character) if isinstance(character, int) else character)
        return problem(source.shown, line, column, "",
                       f"YAML cannot contain character {shown} "
                       "(control characters are not allowed)")
    if isinstance(error, RecursionError):
        return problem(source.shown, 1, 1, "", "YAML nested too deeply to read")
    if isinstance(error, YAMLError):
        return problem(source.shown, 1, 1, "", f"YAML error ({type(error).__name__})")
    return problem(source.shown, 1, 1, "", f"YAML cannot be read ({type(error).__name__})")


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
            sizes[key] = 1 + sum(sizes[id(child)] for child in children(node))
            continue
        if key in sizes:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in children(node):
            if id(child) in on_path:
                return node, "an alias refers to a node that contains it (a cycle)"
            if id(child) not in sizes:
                stack.append((child, False))
    if sizes[id(root)] <= len(sizes) + MAX_ALIAS_NODES:
        return None
    blamed = root  # the deepest node whose expansion alone is too large
    while True:
        biggest = max(children(blamed), key=lambda child: sizes[id(child)], default=None)
        if biggest is None or sizes[id(biggest)] <= MAX_ALIAS_NODES:
            break
        blamed = biggest
    return blamed, (
        f"aliases and merge keys (<<) expand this document to {sizes[id(root)]} nodes, "
        f"more than {MAX_ALIAS_NODES} beyond the {len(sizes)} written: write the "
        "values out instead of repeating anchors"
    )


def _duplicate_keys(source: Source, root: Node, problems: list[Problem]) -> None:
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
                if isinstance(key, ScalarNode) and key.tag != MERGE_TAG:
                    name = str(key.value)
                    field = f"{path}.{name}" if path else name
                    if name in first:
                        line, column = mark(first[name])
                        problems.append(problem(
                            source.shown, *mark(key), field,
                            f"duplicate key (first at line {line}, column {column})",
                        ))
                    else:
                        first[name] = key
                    stack.append((value, field))
                else:
                    stack.append((value, path))
        elif isinstance(node, SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))


@dataclass(frozen=True)
class Parsed:
    """One non-empty document of a file: its index, node and plain value, and its
    duplicate keys (said only once the document is known to be a spec: a key's name is
    the file's text)."""

    index: int
    node: Node
    value: Any
    duplicates: list[Problem]


def documents(source: Source, text: str, problems: list[Problem]) -> list[Parsed]:
    """Every non-empty document of one file.

    libyaml (ruamel.yaml.clib, when installed) reads a good file several times faster
    than the pure-Python parser; a file with any problem is read again by the latter,
    whose messages and positions are the ones ouro reports.
    """
    deep = _flow_too_deep(text)
    if deep is not None:
        problems.append(problem(source.shown, *deep, "",
                                 f"nested more than {MAX_FLOW_DEPTH} levels deep"))
        return []
    if HAVE_LIBYAML:
        fast: list[Problem] = []
        found = _read_documents(source, text, fast, pure=False)
        if not fast and not any(document.duplicates for document in found):
            return found
    return _read_documents(source, text, problems, pure=True)


def _read_documents(source: Source, text: str, problems: list[Problem], *,
                    pure: bool) -> list[Parsed]:
    found: list[Parsed] = []
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
                problems.append(problem(source.shown, *mark(blown[0]), "", blown[1]))
                continue
            duplicates: list[Problem] = []
            _duplicate_keys(source, node, duplicates)
            try:
                value = yaml.constructor.construct_document(node)
            except Exception as error:
                problems.append(_yaml_problem(source, text, error))
                continue
            found.append(Parsed(index - 1, node, value, duplicates))
    if count == 0:
        problems.append(problem(source.shown, 1, 1, "",
                                 "empty: no spec document in this file"))
    return found

