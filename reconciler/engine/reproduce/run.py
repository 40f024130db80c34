"""`ouro reproduce`: a lineage's recorded history run again, outside the lineage.

Rule: the recorded lineage is read, never written or locked (a reproduction changes none
of its refs or objects). The history runs in a private scratch folder removed after,
under the kernel the lineage is pinned to (chosen as apply would choose it: ``Fleet.kernel_of``
and ``kernel_store_writer.prepare``), each generation under the ceilings and model limits
its own observation records, every model call answered by the kernel's ``replay``
provider from the replies the lineage received, in order: no network, no key, no spend.
After each generation its outcome, tree and calls are compared with the record
(``compare``); the first that differs ends the reproduction. The verdict is kept for the
viewer (``state.reproduction_record``).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pygit2

from reconciler.engine import kernel_store_writer
from reconciler.engine.fleet import Fleet
from reconciler.engine.reproduce.compare import Clock, Side, compare_generation
from reconciler.engine.reproduce.limits import LimitsUnreadable, recorded_limits
from reconciler.engine.reproduce.scratch import edit_worktree, scratch_lineage, write_replies
from reconciler.engine.reproduce.verdict import Reproduction
from reconciler.errors import OuroError, Unreproducible
from reconciler.kernel.base import errors as kernel_errors
from reconciler.kernel.base.config import ENTRY_METADATA_KEY, JOURNAL_FILE, LineagePaths
from reconciler.kernel.base.formats import usd_amount
from reconciler.state import reproduction_record
from reconciler.state.observe import observe
from reconciler.state.recorded import (
    RecordedGeneration,
    RecordedHistory,
    check_entry,
    read_history,
    tree_files,
)
from reconciler.state.repos import Lineage

__all__ = ["ReproduceRequest", "reproduce"]


@dataclass(frozen=True)
class ReproduceRequest:
    """What `ouro reproduce` was asked: one field per option."""

    name: str
    to: int | None = None  # the last generation to reproduce (None: the newest)
    specs: tuple[Path, ...] = ()
    state_dir: Path | None = None
    scratch: Path | None = None  # the scratch folder's parent (None: the system's temp)


def _refused(name: str, generations: int, reason: str, message: str) -> Reproduction:
    return Reproduction(name, "refused", generations, reason=reason, message=message)


def _blob_reader(repo: pygit2.Repository) -> Any:
    def read(oid: str) -> bytes:
        found = repo.get(oid)
        return bytes(found.data) if isinstance(found, pygit2.Blob) else b""

    return read


class _Histories:
    """The recorded lineage and the scratch one, opened once, read side by side."""

    def __init__(self, recorded: LineagePaths, scratch: LineagePaths) -> None:
        flags = pygit2.enums.RepositoryOpenFlag
        self.recorded = pygit2.Repository(str(recorded.git_dir), flags.NO_SEARCH | flags.BARE)
        self.scratch = Lineage(scratch)
        self.clock = Clock()

    def side(self, repo: pygit2.Repository, commit: str, observation: dict[str, Any]) -> Side:
        return Side(observation, tree_files(repo, commit), _blob_reader(repo))

    def compare(self, generation: RecordedGeneration, commit: str) -> Any:
        repo = self.scratch.lineage
        observation = self.scratch.observation(generation.number)
        if repo is None or observation is None:
            raise OuroError(f"ouro reproduce: gen {generation.number} left no observation "
                            "in the scratch lineage")
        was = self.side(self.recorded, generation.commit, generation.observation)
        now = self.side(repo.raw, commit, observation)
        journal = (was.files.get(JOURNAL_FILE), now.files.get(JOURNAL_FILE))
        if journal[0] is not None and journal[1] is not None:
            self.clock.learn(was.read(journal[0][1]).decode("utf-8", "replace"),
                             now.read(journal[1][1]).decode("utf-8", "replace"))
        return compare_generation(generation.number, was, now, self.clock)


def _recorded_spend(history: RecordedHistory, through: int) -> Decimal:
    return sum((usd_amount(g.observation.get("accounted_usd")) or Decimal(0)
                for g in history.generations[:through]), Decimal(0))


def _versions(history: RecordedHistory) -> dict[str, dict[str, Any]]:
    """The versions the newest generation ran with that this host's differ from."""
    if not history.generations:
        return {}
    ran_with = history.generations[-1].observation.get("ran_with")
    recorded = ran_with.get("versions") if isinstance(ran_with, dict) else None
    if not isinstance(recorded, dict):
        return {}
    now = kernel_store_writer.host_versions()
    return {name: {"recorded": value, "now": now.get(name)}
            for name, value in recorded.items() if name in now and now.get(name) != value}


def _run(history: RecordedHistory, kernel: kernel_store_writer.LineageKernel,
         scratch_parent: Path | None, through: int) -> tuple[int, Any, Decimal]:
    """Run generations 1..``through`` in a scratch folder: (reproduced, divergence, spend)."""
    spend = Decimal(0)
    with tempfile.TemporaryDirectory(prefix="ouro-reproduce-", dir=scratch_parent) as folder:
        replies = write_replies(Path(folder) / "replies", history.replies(through))
        (Path(folder) / "places").mkdir()
        paths = scratch_lineage(Path(folder) / "places", history.paths, history.root,
                                history.observation_root)
        histories = _Histories(history.paths, paths)
        for generation in history.generations[:through]:
            ceilings, model = recorded_limits(generation.observation, replies)
            if generation.edited is not None:
                edit_worktree(history.paths, paths, generation.edited)
            try:
                outcome = kernel.generation(paths=paths, model=model, ceilings=ceilings,
                                            api_key=None, provenance=None, cancel=None)
            except kernel_errors.KernelError as error:
                raise OuroError(f"ouro reproduce: gen {generation.number} could not run "
                                f"here: {error}") from error
            spend += outcome.accounted_usd
            divergence = histories.compare(generation, outcome.lineage_commit)
            if divergence is not None:
                return generation.number - 1, divergence, spend
    return through, None, spend


def _prepared(fleet: Fleet, name: str, paths: LineagePaths, to: int | None
              ) -> tuple[RecordedHistory, Any] | Reproduction:
    observed = observe(paths)
    total = observed.generations
    try:
        check_entry(name, observed.lineage_metadata or {ENTRY_METADATA_KEY: None})
    except Unreproducible as refusal:
        return _refused(name, total, refusal.reason, str(refusal))
    if observed.running is not None:
        return _refused(name, total, "not-reproducible-now",
                        f"ouro: {name} is {observed.running}: reproduce it once that "
                        "generation is done")
    if not observed.is_lineage or observed.problems or observed.interrupted is not None:
        why = "; ".join(p.message for p in observed.problems) or (
            "an interrupted generation's leftovers" if observed.interrupted else "not a lineage")
        return _refused(name, total, "not-reproducible-now",
                        f"ouro: {name} cannot be read whole now ({why}): run `ouro plan` "
                        "and `ouro verify` first")
    if to is not None and to > total:
        raise OuroError(f"ouro reproduce: {name} has {total} generation(s), not {to}: "
                        f"pass --to {total} or less")
    through = total if to is None else to
    try:
        history = read_history(paths, through)
        history.check_replayable(through)
    except Unreproducible as refusal:
        return _refused(name, through, refusal.reason, str(refusal))
    choice = fleet.kernel_of(name, observed)
    if choice is None or choice.source is None:
        return _refused(name, through, "kernel-unavailable",
                        choice.message if choice is not None else
                        f"ouro: which kernel runs {name} cannot be told")
    return history, choice


def reproduce(request: ReproduceRequest) -> Reproduction:
    """Reproduce ``request.name``'s history; the verdict (kept for the viewer too)."""
    fleet = Fleet(request.state_dir, command="ouro reproduce")
    found = fleet.lineages([request.name], list(request.specs))[0]
    prepared = _prepared(fleet, request.name, found.paths, request.to)
    if isinstance(prepared, Reproduction):
        return prepared
    history, choice = prepared
    through = len(history.generations)
    kernel = kernel_store_writer.prepare(fleet.store, fleet.identity, choice, history.metadata)
    try:
        done, divergence, spend = _run(history, kernel, request.scratch, through)
    except LimitsUnreadable as error:
        return _refused(request.name, through, "limits-unreadable",
                        f"ouro: {request.name}: {error}")
    finally:
        kernel.close()
    verdict = Reproduction(
        request.name, "diverged" if divergence is not None else "reproduced", through,
        reproduced=done, divergence=divergence, kernel=dict(kernel.ran_with["kernel"]),
        recorded_spend_usd=str(_recorded_spend(history, through)), spend_usd=str(spend),
        replies=len(history.replies(through)), versions=_versions(history),
        heads=(history.lineage_head, history.observation_head))
    reproduction_record.save(reproduction_record.record_dir(fleet.state_dir), request.name,
                             found.paths, verdict.as_json(), verdict.heads or ("", ""))
    return verdict
