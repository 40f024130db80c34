"""The loader: spec files and folders -> validated, path-resolved ``LoadedSpec`` values.

Reads files and nothing else. Every problem in every file is collected and
raised at once as one ``SpecError`` (each ``FILE:LINE:COL: field.path: message``,
taken from the YAML node of the offending value, or the key for an unknown
key, or the mapping for a missing field). This module never raises anything
else: foreign errors (OSError, ruamel.yaml, pydantic, decoding) are translated
at the boundary.

The steps, one module each:

    sources       which files, and their text (read as hostile input)
    yamldocs      text -> YAML nodes and plain values (positions kept)
    messages      pydantic's errors -> problems at FILE:LINE:COL
    set_members   a LineageSet -> its members, each a Lineage
    (here)        each document resolved: places absolute, probes read, digest
    overlaps      names unique, places not shared, places a lineage may live in
    fork_parents  each fork's parent and what no plan can change about it
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reconciler.errors import Problem, SpecError
from reconciler.spec import API_VERSION, KIND, SET_KIND, LineageSpec, ModelSpec, places, units
from reconciler.spec.fork_parents import state_dir_or_none, with_parents
from reconciler.spec.loaded import LoadedSpec, ParentPlaces, default_places
from reconciler.spec.messages import plain_place, validated
from reconciler.spec.models import RECORDED
from reconciler.spec.overlaps import check_places, check_unique
from reconciler.spec.positions import locate, mark, problem
from reconciler.spec.probes import ResolvedProbe, resolve
from reconciler.spec.set_members import validate_set
from reconciler.spec.sources import (
    MAX_FILE_BYTES,
    SPEC_SUFFIXES,
    Document,
    Source,
    collect,
    read_text,
)
from reconciler.spec.yamldocs import MAX_ALIAS_NODES, MAX_FLOW_DEPTH, Parsed, documents
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

_resolve_state_dir = state_dir  # ``load_specs``' own parameter is named state_dir
RECORDED_DIR = ".recorded"  # <state dir>/.recorded/NAME: provider recorded's replay folder


def _validate(source: Source, parsed: Parsed, problems: list[Problem]) -> list[Document]:
    """One document: a Lineage, or a LineageSet's members (``set_members``).

    A document that is not an ouro spec (no mapping, no ``apiVersion: ouro/v1``, no
    kind of ours) is named by its place and what it lacks, never by its values or keys:
    it may be any file (an environment file of keys), and the message may go anywhere
    (a webhook, a CI log)."""
    node, value, shown = parsed.node, parsed.value, source.shown
    if not isinstance(value, dict):
        problems.append(problem(
            shown, *mark(node), "",
            "a spec document is a mapping with apiVersion, kind, metadata and spec, not "
            f"{units.kind(value)}",
        ))
        return []
    header_problems = len(problems)
    kinds = (KIND, SET_KIND)
    for field, expected in (("apiVersion", (API_VERSION,)), ("kind", kinds)):
        wanted = " or ".join(expected)
        if field not in value:
            problems.append(problem(shown, *mark(node), field,
                                    f"required, but missing (this file must say {field}: "
                                    f"{wanted})"))
        elif value[field] not in expected:
            problems.append(problem(shown, *locate(node, (field,), key=False), field,
                                    f"must be {wanted}; this file says another value "
                                    f"({units.kind(value[field])})"))
    if len(problems) > header_problems:
        return []  # not an ouro spec: its other fields would only be noise (or secrets)
    problems.extend(parsed.duplicates)
    if value["kind"] == SET_KIND:
        return validate_set(source, parsed.index, node, value, problems)
    spec = validated(LineageSpec, source, node, value, problems, plain_place)
    return [] if spec is None else [Document(source, parsed.index, node, spec)]


def _absolute(base: Path, path: Path) -> Path:
    return Path(os.path.abspath(base / path))


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


def _resolve(document: Document, default_dir: Path, shared: _Shared) -> LoadedSpec:
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
        line=mark(document.node)[0],
        sha256=hashlib.sha256(shared.canonical(spec).encode("utf-8")).hexdigest(),
        declared_branch=storage.branch,
        declared_observation_branch=storage.observation_branch,
        probes=_probes(document),
        set_name=document.set_name,
        member=document.member,
        recorded_dir=(default_dir / RECORDED_DIR / spec.name if model.provider == RECORDED
                      else None),
    )


def _probes(document: Document) -> tuple[ResolvedProbe, ...]:
    """The spec's probes, files read (they were checked moments ago, at validation)."""
    try:
        return tuple(resolve(probe) for probe in document.spec.spec.probes)
    except ValueError as error:
        line, column = mark(document.node)
        raise SpecError([problem(document.source.shown, line, column, "spec.probes",
                                 f"{error}; run again once the probe's files are back")]
                        ) from None


def load_specs(paths: Sequence[Path], *, state_dir: Path | None = None) -> list[LoadedSpec]:
    """Load, validate and resolve every spec under ``paths``; all problems or none.

    Raises ``SpecError`` listing every problem (``FILE:LINE:COL: field: message``).
    """
    problems: list[Problem] = []
    found: list[Document] = []
    if not paths:
        raise SpecError([problem("-", 1, 1, "", "no spec file or folder given")])
    places.ask_python_paths()  # (answered while the specs are parsed: check_places)
    sources = collect(paths, problems)
    for source in sources:
        text = read_text(source, problems)
        if text is None:
            continue
        for parsed in documents(source, text, problems):
            found.extend(_validate(source, parsed, problems))
    found, loaded, default_dir = _resolved(found, state_dir, problems)
    check_unique(found, loaded, problems)
    check_places(found, loaded, problems, default_dir or state_dir_or_none(state_dir))
    loaded = with_parents(found, loaded, problems, state_dir)
    if problems:
        files = dict.fromkeys([*(s.shown for s in sources), *(p.file for p in problems)])
        order = {shown: rank for rank, shown in enumerate(files)}
        unique = dict.fromkeys(problems)  # the same problem found twice is one problem
        raise SpecError(sorted(unique, key=lambda p: (order[p.file], p.line, p.column)))
    return loaded


def _resolved(found: list[Document], explicit: Path | None, problems: list[Problem]
              ) -> tuple[list[Document], list[LoadedSpec], Path | None]:
    """Each document resolved (``_resolve``), and the documents that were; the state dir
    is looked up once, and only when a spec names no place of its own."""
    loaded: list[LoadedSpec] = []
    default_dir: Path | None = None
    shared = _Shared()
    for document in found:
        if document.spec.spec.storage.path is None and default_dir is None:
            try:
                default_dir = _resolve_state_dir(explicit)
            except (RuntimeError, KeyError, OSError, ValueError) as error:
                problems.append(problem(
                    document.source.shown,
                    *locate(document.node, ("spec", "storage", "path"), key=False),
                    "spec.storage.path",
                    f"no default: the state dir cannot be found ({error}); set "
                    "spec.storage.path, --state-dir or OURO_STATE_DIR",
                ))
                continue
        loaded.append(_resolve(document, default_dir or Path("/"), shared))
    if len(loaded) != len(found):
        found = [d for d in found if d.spec.spec.storage.path is not None]
    return found, loaded, default_dir
