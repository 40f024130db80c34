"""A selected LineageSet epoch by epoch: its decisions' records, and the members they
make. The engine's, never the kernel's.

Rule: a decision (``reconciler.plan.selection``) is written as a record before anything
acts on it: ``decision.json`` on the branch ``selection/<set>/e<epoch>`` of each
candidate's observation repository (``record_branch``). The set's members are then a
function of the set's spec and its records (``expand``): epoch 1 is the set as written;
each record stops its ``stopped`` members (their generations stay where they are),
gives its ``kept`` members ``every`` more generations, and adds its ``born`` members,
forks of their parents at the recorded generation. A kill after the record leaves
the new epoch planned; the next apply finishes it. Nothing is deleted.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pygit2

from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.load import LoadedSpec, default_places
from reconciler.spec.loaded import ParentPlaces
from reconciler.spec.models import ForkSpec
from reconciler.spec.selection import SelectionSpec
from reconciler.spec.sets import NotSelected

__all__ = ["EPOCH_LABEL", "PARENT_LABEL", "expand", "read_record", "record_branch",
           "selected_sets",
           "write_record"]

RECORD_FILE = "decision.json"
EPOCH_LABEL = "ouro/epoch"
PARENT_LABEL = "ouro/parent"
SET_LABEL = "ouro/set"
_SIGNATURE = ("ouro", "ouro@localhost")


def selected_sets(specs: Sequence[LoadedSpec]
                  ) -> list[tuple[str, SelectionSpec, list[LoadedSpec]]]:
    """Each selected set among ``specs`` (sorted by name): its name, its rule and its
    members, in the order they come."""
    members: dict[str, list[LoadedSpec]] = {}
    rules: dict[str, SelectionSpec] = {}
    for spec in specs:
        if spec.member is not None and spec.member.selection is not None:
            members.setdefault(spec.member.set_name, []).append(spec)
            rules.setdefault(spec.member.set_name, spec.member.selection)
    return [(name, rules[name], members[name]) for name in sorted(members)]


def record_branch(set_name: str, epoch: int) -> str:
    """The branch of the decision at the end of ``epoch`` in an observation repository."""
    return f"selection/{set_name}/e{epoch}"


def _repo(paths: LineagePaths) -> pygit2.Repository | None:
    try:
        return pygit2.Repository(str(paths.observations),
                                 pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, OSError):
        return None


def read_record(paths: LineagePaths, set_name: str, epoch: int) -> dict[str, Any] | None:
    """The recorded decision of ``epoch`` in this lineage's observations (None: none)."""
    repo = _repo(paths)
    if repo is None:
        return None
    ref = repo.references.get(f"refs/heads/{record_branch(set_name, epoch)}")
    if ref is None:
        return None
    commit = repo.get(ref.resolve().target)
    if not isinstance(commit, pygit2.Commit) or RECORD_FILE not in commit.tree:
        return None
    blob = repo.get(commit.tree[RECORD_FILE].id)
    try:
        found = json.loads(blob.data) if isinstance(blob, pygit2.Blob) else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def write_record(paths: LineagePaths, set_name: str, record: Mapping[str, Any]) -> None:
    """Write the decision ``record`` (its ``epoch``) into this lineage's observations; a
    record already there is kept (the first written is the decision)."""
    repo = _repo(paths)
    if repo is None:
        raise OSError(f"{paths.observations}: no observation repository to record in")
    name = f"refs/heads/{record_branch(set_name, int(record['epoch']))}"
    if repo.references.get(name) is not None:
        return
    text = json.dumps(record, sort_keys=True, indent=2) + "\n"
    builder = repo.TreeBuilder()
    builder.insert(RECORD_FILE, repo.create_blob(text.encode("utf-8")),
                   pygit2.enums.FileMode.BLOB)
    signature = pygit2.Signature(*_SIGNATURE, int(time.time()), 0)
    oid = repo.create_commit(None, signature, signature,
                             f"selection {set_name}: end of epoch {record['epoch']}\n",
                             builder.write(), [])
    repo.references.create(name, oid)


def _born_spec(template: LoadedSpec, name: str, parent: LoadedSpec, generation: int,
               epoch: int, generations: int, home: Path) -> LoadedSpec:
    """A new member: ``template``'s spec under ``name``, forked from ``parent``."""
    places = default_places(home / name, name)
    body = template.spec.spec
    storage = body.storage.model_copy(update={
        "path": places.worktree, "git_dir": places.git_dir,
        "observations": places.observations, "branch": places.branch,
        "observation_branch": places.observation_branch})
    labels = {**template.labels, SET_LABEL: template.set_name or "", EPOCH_LABEL: str(epoch),
              PARENT_LABEL: parent.name}
    labels.pop("ouro/replica", None)  # a new member is no replica of the spec's
    spec = template.spec.model_copy(update={
        "metadata": template.spec.metadata.model_copy(update={"name": name,
                                                              "labels": labels}),
        "spec": body.model_copy(update={
            "generations": generations, "storage": storage,
            "from_": ForkSpec(lineage=parent.name, generation=generation)})})
    return dataclasses.replace(
        template, spec=spec, declared_branch=None, declared_observation_branch=None,
        fork_parent=ParentPlaces(parent.paths(), parent.declared_branch,
                                 parent.declared_observation_branch))


def _with_generations(spec: LoadedSpec, generations: int) -> LoadedSpec:
    body = spec.spec.spec.model_copy(update={"generations": generations})
    return dataclasses.replace(spec, spec=spec.spec.model_copy(update={"spec": body}))


def _stopped(spec: LoadedSpec, record: Mapping[str, Any], epoch: int,
             rule: SelectionSpec) -> LoadedSpec:
    """A member the decision of ``epoch`` (its ``record``) stopped: ``not-selected``."""
    if spec.member is None:
        return spec
    value = record.get("values", {}).get(spec.name)
    born = spec.member.born_epoch
    stop = NotSelected(epoch, (epoch - born + 1) * rule.every, rule.by,
                       float(value) if isinstance(value, int | float)
                       and not isinstance(value, bool) else None,
                       len(record.get("kept", [])))
    return dataclasses.replace(spec, member=dataclasses.replace(spec.member,
                                                                not_selected=stop))


def _set_epochs(members: list[LoadedSpec], rule: SelectionSpec, home: Path
                ) -> tuple[list[LoadedSpec], int]:
    """The set's members after every recorded decision, and the current epoch."""
    living = {spec.name: spec for spec in members}
    born_in = dict.fromkeys(living, 1)
    every: dict[str, LoadedSpec] = dict(living)
    set_name = members[0].set_name or ""
    epoch = 1
    while epoch < rule.epochs:
        record = next((found for spec in living.values()
                       if (found := read_record(spec.paths(), set_name, epoch)) is not None),
                      None)
        if record is None:
            break
        for name in record.get("stopped", []):
            if living.pop(name, None) is not None:
                every[name] = _stopped(every[name], record, epoch, rule)
        for birth in record.get("born", []):
            parent = every.get(birth["parent"])
            if parent is None:
                continue
            spec = _born_spec(parent, birth["name"], parent, int(birth["generation"]),
                              epoch + 1, rule.every, home)  # the parent's cell, too
            if spec.member is not None:
                spec = dataclasses.replace(spec, member=dataclasses.replace(
                    spec.member, born_epoch=epoch + 1, not_selected=None))
            living[spec.name] = every[spec.name] = spec
            born_in[spec.name] = epoch + 1
        epoch += 1
        for name in list(living):
            if born_in[name] < epoch:
                living[name] = every[name] = _with_generations(
                    every[name], (epoch - born_in[name] + 1) * rule.every)
    return list(every.values()), epoch


def expand(specs: Sequence[LoadedSpec], home: Path | None) -> list[LoadedSpec]:
    """``specs`` with each selected set's members after its recorded decisions (a set
    without selection, and every lineage outside a set, unchanged)."""
    sets: dict[str, list[LoadedSpec]] = {}
    for spec in specs:
        if spec.member is not None and spec.member.selection is not None:
            sets.setdefault(spec.member.set_name, []).append(spec)
    if not sets or home is None:
        return list(specs)
    grown: dict[str, list[LoadedSpec]] = {}
    for set_name, members in sets.items():
        rule = members[0].member.selection if members[0].member else None
        assert isinstance(rule, SelectionSpec)
        grown[set_name] = _set_epochs(members, rule, home)[0]
    out: list[LoadedSpec] = []
    for spec in specs:
        if spec.member is not None and spec.member.set_name in grown:
            if spec is sets[spec.member.set_name][0]:
                out.extend(grown[spec.member.set_name])
            continue
        out.append(spec)
    return out


def current_epoch(members: Sequence[LoadedSpec], rule: SelectionSpec,
                  home: Path) -> tuple[int, list[str]]:
    """The set's current epoch and its living members' names."""
    every, epoch = _set_epochs(list(members), rule, home)
    return epoch, sorted(spec.name for spec in every
                         if spec.member is None or spec.member.not_selected is None)
