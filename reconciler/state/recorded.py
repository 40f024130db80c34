"""A lineage's recorded history, as a reproduction reads it: each generation's observation,
its commit's tree, and every model reply the lineage received, in order.

Rule: read-only, through ``state.repos`` (pygit2 only). What a reproduction needs and
cannot find is said, never guessed: a lineage whose root metadata names no kernel entry
point (the original instrument's, or an ouro from before pinned kernels) has no kernel
ouro can run again; a generation whose call was answered 200 without its reply in the
record cannot be answered again. Those are ``Unreproducible`` (a reason code and the
message); a history that does not read is ``StateError``, as everywhere.

The replies are the calls answered 200, in lineage order (generation, then
``request_index``): exactly what the kernel's ``replay`` provider counts with its cursor
(``replay_cursor``: the calls answered 200 through a generation). A person's edit of the
worktree between generations is part of the record too: the kernel committed it as an
``external edit`` right before the next generation, and its tree is read with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pygit2

from reconciler.errors import StateError, Unreproducible
from reconciler.kernel.base.config import ENTRY_METADATA_KEY, LineagePaths
from reconciler.kernel.base.formats import EXTERNAL_EDIT_SUBJECT, parse_generation_subject
from reconciler.state.repos import READ_ERRORS, Lineage, Repo, first_line

__all__ = ["RecordedCall", "RecordedGeneration", "RecordedHistory", "Unreproducible",
           "check_entry", "read_history", "tree_files"]

# What the kernel's replay provider can answer as recorded: a whole reply (200, not cut
# off). A 400 is the broker's own refusal (no provider was asked): the broker refuses the
# same request again. A 402, a provider's failure (502) or a reply cut off (the
# X-Ouroboros-Truncated signal) a replay cannot give back.
_REPLAYED = 200
_BROKER_OWN = frozenset({400})


@dataclass(frozen=True)
class RecordedCall:
    """One model call as the observation records it."""

    generation: int
    index: int
    http_status: int | None
    prompt: str | None
    response: str | None
    truncated: bool

    @property
    def answered(self) -> bool:
        """Answered with a reply: the replay provider's cursor counts it."""
        return self.http_status == _REPLAYED


@dataclass(frozen=True)
class RecordedGeneration:
    number: int
    commit: str  # the lineage commit its observation names
    observation: dict[str, Any]
    edited: str | None = None  # the tree of the `external edit` committed before it, if any

    @property
    def outcome(self) -> str:
        return str(self.observation.get("outcome"))

    @property
    def exit_status(self) -> Any:
        return self.observation.get("exit_status")

    @property
    def calls(self) -> list[RecordedCall]:
        found = self.observation.get("model_calls")
        return [_call(self.number, position, call)
                for position, call in enumerate(found if isinstance(found, list) else [], 1)]


def _call(generation: int, position: int, call: Any) -> RecordedCall:
    call = call if isinstance(call, dict) else {}
    status = call.get("http_status")
    index = call.get("request_index")
    return RecordedCall(
        generation, index if isinstance(index, int) else position,
        status if isinstance(status, int) else None,
        call.get("prompt") if isinstance(call.get("prompt"), str) else None,
        call.get("response") if isinstance(call.get("response"), str) else None,
        call.get("truncated") is True)


@dataclass(frozen=True)
class RecordedHistory:
    """What a reproduction of ``paths``' lineage starts from and compares with."""

    paths: LineagePaths
    metadata: dict[str, Any]  # the root's .ouroboros-lineage.json
    root: str  # the lineage branch's root commit (the seed)
    observation_root: str  # the observation branch's root commit
    lineage_head: str
    observation_head: str
    generations: tuple[RecordedGeneration, ...]

    def replies(self, through: int | None = None) -> list[str]:
        """Every reply answered 200, in order, through generation ``through`` (all)."""
        return [call.response or "" for generation in self.generations
                if through is None or generation.number <= through
                for call in generation.calls if call.answered]

    def check_replayable(self, through: int) -> None:
        """``Unreproducible`` when a call of generations 1..``through`` cannot be answered
        again as the record has it."""
        for generation in self.generations[:through]:
            for call in generation.calls:
                _check_call(call, generation.number)


def _check_call(call: RecordedCall, number: int) -> None:
    where = f"gen {number}'s call {call.index}"
    if call.answered and call.response is None:
        raise Unreproducible(
            "reply-not-recorded", f"{where} was answered 200 but the record does not hold "
            "its reply: this lineage was recorded before replies were kept")
    if call.answered and call.truncated:
        raise Unreproducible(
            "unreplayable-call", f"{where}'s reply was cut off at the output-token limit; "
            "the replay provider cannot give the truncation signal back")
    if not call.answered and call.http_status not in _BROKER_OWN:
        raise Unreproducible(
            "unreplayable-call", f"{where} was answered {call.http_status} (a budget "
            "refusal or a provider's failure), which replayed replies cannot give back")


def check_entry(label: str, metadata: dict[str, Any]) -> None:
    """``Unreproducible`` for a lineage whose root metadata names no kernel entry point."""
    if ENTRY_METADATA_KEY not in metadata:
        raise Unreproducible(
            "no-kernel-entry", f"ouro: {label} was born under the original instrument "
            "(or an ouro from before pinned kernels): its root metadata names no kernel entry "
            "point, so ouro cannot run the kernel it was born under again")


def _walk_generations(repo: Repo, head: pygit2.Commit) -> dict[str, tuple[int, str | None]]:
    """lineage commit id -> its generation number and the tree of the ``external edit``
    the kernel committed right before it (a person's edit of the worktree), if any."""
    found: dict[str, tuple[int, str | None]] = {}
    edits: dict[str, str] = {}  # an external edit's parent -> its tree
    for commit in repo.first_parents(head):
        parsed = parse_generation_subject(str(commit.message))
        if parsed is not None:
            parent = commit.parent_ids[0] if commit.parent_ids else None
            found[str(commit.id)] = (parsed.number, str(parent) if parent else None)
        elif first_line(commit) == EXTERNAL_EDIT_SUBJECT:
            edits[str(commit.id)] = str(commit.tree_id)
    return {commit: (number, edits.get(parent or ""))
            for commit, (number, parent) in found.items()}


def read_history(paths: LineagePaths, generations: int) -> RecordedHistory:
    """Generations 1..``generations`` of the lineage at ``paths``, each checked against its
    branch; ``Unreproducible`` when ouro cannot run its kernel again, ``StateError`` when
    the history does not read."""
    lineage = Lineage(paths)
    repo, head = lineage.lineage, lineage.lineage_head()
    observations, obs_head = lineage.observations, lineage.observation_head()
    if repo is None or head is None or observations is None or obs_head is None:
        raise StateError(f"ouro: {paths.label}: its repositories do not read as a lineage")
    root, metadata = lineage.root_metadata()
    if root is None or not metadata:
        raise StateError(f"ouro: {paths.label}: its seed's metadata does not read")
    check_entry(paths.label, metadata)
    on_branch = _walk_generations(repo, head)
    recorded: list[RecordedGeneration] = []
    for number in range(1, generations + 1):
        observation = lineage.observation(number)
        commit = observation.get("lineage_commit") if observation else None
        found = on_branch.get(commit) if isinstance(commit, str) else None
        if observation is None or not isinstance(commit, str) or found is None or (
                found[0] != number):
            raise StateError(f"ouro: {paths.label}: gen {number}'s observation does not name "
                             "its commit on the branch: run `ouro verify`")
        recorded.append(RecordedGeneration(number, commit, observation, found[1]))
    return RecordedHistory(paths, metadata, root, str(observations.root(obs_head).id),
                           str(head.id), str(obs_head.id), tuple(recorded))


def tree_files(repo: pygit2.Repository, commit: str) -> dict[str, tuple[int, str]]:
    """Every path of a commit's tree (folders walked, not listed): its mode and object id."""
    try:
        found = repo.get(commit)
        if not isinstance(found, pygit2.Commit):
            raise StateError(f"ouro: {commit} is not a commit")
        return dict(_entries(repo, found.tree, ""))
    except READ_ERRORS as error:
        raise StateError(f"ouro: the tree of {commit} does not read: {error}") from error


def _entries(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str
             ) -> Iterator[tuple[str, tuple[int, str]]]:
    for entry in tree:
        path = prefix + str(entry.name)
        if entry.type_str == "tree":
            sub = repo.get(entry.id)
            assert isinstance(sub, pygit2.Tree)
            yield from _entries(repo, sub, path + "/")
        else:
            yield path, (int(entry.filemode), str(entry.id))
