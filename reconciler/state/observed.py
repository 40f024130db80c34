"""What observing a lineage finds: the records ``state.observe`` returns. Data only.

Rule: frozen records, no reading here. ``Observed`` is one lineage as its three places
showed it at one moment; ``ReadProblem.code`` is the refusal reason the planner gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import LineagePaths
from reconciler.kernel.base.refusals import ProblemCode
from reconciler.state.holders import Holder
from reconciler.state.stops import RecordedStop

__all__ = ["GenerationCommit", "Interrupted", "InterruptedKind", "Observed", "ReadProblem"]

InterruptedKind = Literal["roll-forward", "discard", "cleanup"]


@dataclass(frozen=True)
class ReadProblem:
    """Something that makes the lineage unsafe to extend; ``code`` is the refusal reason."""

    code: ProblemCode
    message: str


@dataclass(frozen=True)
class Interrupted:
    """Leftovers of an interrupted generation (docs/kernel.md: a crash-safe transaction).

    ``roll-forward``: an observation names commit C whose parent is the branch
    head (publish it); ``discard``: an intent marker with no observation naming
    its commit (drop it, the generation re-runs); ``cleanup``: everything was
    published, only the marker (and maybe the worktree) is left.
    """

    kind: InterruptedKind
    generation: int | None
    lineage_commit: str | None
    phase: str | None
    detail: str


@dataclass(frozen=True)
class GenerationCommit:
    number: int
    status: formats.Status | None
    commit: str


@dataclass(frozen=True)
class Observed:
    """One lineage as its repositories show it now."""

    paths: LineagePaths
    worktree_exists: bool
    git_dir_exists: bool
    observations_exist: bool
    is_lineage: bool  # the git dir is a repository whose branch descends from a `seed` root
    root_commit: str | None
    lineage_metadata: dict[str, Any] | None
    observation_metadata: dict[str, Any] | None
    lineage_head: str | None
    observation_head: str | None
    head_branch: str | None  # the branch the lineage git dir's HEAD names
    generations: int  # generation commits on the branch (first-parent)
    last_generation: GenerationCommit | None
    observed_generations: int  # generations/NNNN.json files on the observation branch
    last_observation: dict[str, Any] | None
    dirty: bool
    dirty_paths: tuple[str, ...]
    interrupted: Interrupted | None
    problems: tuple[ReadProblem, ...]
    full_walk: bool  # the whole first-parent history had to be read
    # The branches read: ``paths``' own, or (when the spec names a branch that does not
    # exist) the ones holding the lineage, so that a refused lineage still shows itself.
    branches_read: dict[str, str | None] = field(default_factory=dict)
    held_by: Holder | None = None  # another process holds the lineage's apply lock
    # An object the newest commits added does not read whole: nothing else was read, and
    # nothing may read the histories through libgit2 (``state.audit_objects``).
    newest_unreadable: bool = False
    # digest -> generations with a probe record (``reconciler.state.probes``)
    probe_coverage: dict[str, frozenset[int]] = field(default_factory=dict)
    # digest -> generation -> metrics (None: a probe failure): what ``spec.until`` reads
    probe_metrics: dict[str, dict[int, dict[str, Any] | None]] = field(default_factory=dict)
    # The stop an apply made before the next generation, while the heads are its own
    # (``reconciler.state.stops``)
    stopped: RecordedStop | None = None
    # A fork's birth cut off midway (``reconciler.state.forks.birth_cut_off``): shown as
    # not born; the birth made again removes its leftovers first
    birth_cut_off: bool = False

    @property
    def running(self) -> str | None:
        """"running in apply pid N on HOST, generation K" while another apply holds it."""
        if self.held_by is None:
            return None
        interrupted = self.interrupted.generation if self.interrupted is not None else None
        return self.held_by.running(interrupted or self.generations + 1)

    @property
    def any_exists(self) -> bool:
        return self.worktree_exists or self.git_dir_exists or self.observations_exist

    @property
    def all_exist(self) -> bool:
        return self.worktree_exists and self.git_dir_exists and self.observations_exist

    def problem(self, code: ProblemCode) -> ReadProblem | None:
        return next((p for p in self.problems if p.code == code), None)
