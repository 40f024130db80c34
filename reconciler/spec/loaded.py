"""What loading makes of a spec: ``LoadedSpec`` (validated, every place absolute, defaults
filled), a fork's ``ParentPlaces``, and ``default_places`` (where a lineage lives when its
spec names no place). Re-exported by ``reconciler.spec.load``, their public home.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reconciler.kernel.base.config import Ceilings, LineagePaths, ModelConfig
from reconciler.spec import sets
from reconciler.spec.models import RECORDED, ForkSpec, LineageSpec
from reconciler.spec.probes import ResolvedProbe

__all__ = ["LoadedSpec", "ParentPlaces", "default_places"]


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


