"""The kernel's inputs: plain frozen values, built by the reconciler from a spec.

Trusted harness. This module is the whole interface between the control plane
and the physics: the kernel never sees a spec, only these values. Nothing here
does I/O. Money is ``Decimal``; sizes are bytes; durations are whole seconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from . import confinement, registry

PROVIDERS = registry.PROVIDERS  # one record per provider: ``registry``
OFFLINE_PROVIDERS = registry.OFFLINE_PROVIDERS
ENFORCEMENTS = ("auto", "systemd", "cgroup2", "cgroup1")

LINEAGE_SCHEMA = "ouroboros-lineage/v2"
OBSERVATIONS_SCHEMA = "ouroboros-observations/v1"
GENERATION_SCHEMA = "ouroboros-generation-observation/v1"
MODEL_CALL_SCHEMA = "ouroboros-model-call/v1"
CAPABILITIES_SCHEMA = "ouroboros-kernel-capabilities/v1"
# The kernel's entry point (``python -m <kernel package>``, docs/kernel-entry.md): the
# request it reads on stdin and the outcome it writes on stdout.
ENTRY_REQUEST_SCHEMA = "ouro-kernel-request/v1"
ENTRY_OUTCOME_SCHEMA = "ouro-kernel-outcome/v1"
# ouro's added key in both metadata files: the request schema the birth kernel's entry
# point speaks (absent: born before pinned kernels, extended only by an identical kernel).
ENTRY_METADATA_KEY = "ouro_kernel_entry"

METADATA_FILE = ".ouroboros-lineage.json"
JOURNAL_FILE = "journal.md"
ORGANISM_FILE = "organism.el"
# Top-level names of the lineage tree that belong to the kernel, not the organism.
KERNEL_OWNED_NAMES = frozenset({".git", METADATA_FILE, JOURNAL_FILE})


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input_usd_per_mtok: Decimal
    output_usd_per_mtok: Decimal

    def worst_case(self, prompt_tokens: int, output_tokens: int) -> Decimal:
        return (
            Decimal(prompt_tokens) * self.input_usd_per_mtok
            + Decimal(output_tokens) * self.output_usd_per_mtok
        ) / Decimal(1_000_000)


FREE = Price(Decimal(0), Decimal(0))


@dataclass(frozen=True)
class ModelConfig:
    provider: str
    name: str
    price: Price = FREE
    base_url: str | None = None
    api_key_env: str | None = None
    replay_dir: Path | None = None
    max_output_tokens: int = 12000
    max_prompt_bytes: int = 196608
    request_timeout_seconds: int = 600
    budget_usd: Decimal = Decimal("1.00")
    store: bool = False  # openai (Responses API): ask the provider to keep the response


@dataclass(frozen=True)
class Ceilings:
    wall_seconds: int = 600
    cpu_seconds: int = 120
    memory_bytes: int = 1 << 30
    swap_bytes: int = 0
    tasks: int = 64
    worktree_bytes: int = 256 << 20
    worktree_files: int = 10000
    tmp_bytes: int = 64 << 20
    run_bytes: int = 16 << 20
    enforcement: str = "auto"
    model_requests: int = 256  # requests to model.sock per generation; beyond: 429, counted
    model_audit_bytes: int = 32 << 20  # bytes of model-call records per generation; idem

    @property
    def cpu_quota_percent(self) -> int:
        """Aggregate CPU as a whole-percent quota of one core over the wall limit."""
        return max(1, (self.cpu_seconds * 100) // self.wall_seconds)


@dataclass(frozen=True)
class LineagePaths:
    """The three places of a lineage, its two branches, and its name.

    ``name`` is the spec's ``metadata.name``, carried as given (it names cgroup
    scopes and messages); it is empty when a lineage is opened by its places alone,
    and is never guessed from the branch. ``label`` is what messages call it. Two
    values are equal when their places and branches are: the name is not compared.
    """

    worktree: Path
    git_dir: Path
    observations: Path
    branch: str
    observation_branch: str
    name: str = dataclasses.field(default="", compare=False)

    @property
    def label(self) -> str:
        return self.name or self.branch


@dataclass(frozen=True)
class Identity:
    """An instrument: where it came from and the physics it runs."""

    repository: str
    ref: str
    commit: str
    fingerprint: str


@dataclass(frozen=True)
class Provenance:
    """Why a generation ran: recorded in its observation (ouro's added key)."""

    spec_sha256: str | None = None
    spec_repository_commit: str | None = None
    spec_path: str | None = None


def format_memory(value: int) -> str:
    """systemd-style size: ``1G`` for 1 GiB, ``0`` for zero, bytes when not round."""
    for suffix, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        unit = 1 << shift
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def constraints_manifest(ceilings: Ceilings, model: ModelConfig) -> dict[str, Any]:
    """The `constraints` object shown to the organism and recorded per generation.

    Canonical disclosure: exactly what is enforced, nothing about the backend
    (no provider, model, key or price).
    """
    return {
        "disclosure": "canonical",
        "generation": {
            "wall_seconds": ceilings.wall_seconds,
            "aggregate_cpu_seconds": ceilings.cpu_seconds,
            "cpu_quota_percent": ceilings.cpu_quota_percent,
            "memory_max": format_memory(ceilings.memory_bytes),
            "memory_swap_max": format_memory(ceilings.swap_bytes),
            "tasks_max": ceilings.tasks,
        },
        "filesystem": {
            "work_bytes": ceilings.worktree_bytes,
            "published_files": ceilings.worktree_files,
            "tmp_bytes": ceilings.tmp_bytes,
            "run_bytes": ceilings.run_bytes,
        },
        "model": {
            "max_prompt_bytes": model.max_prompt_bytes,
            "max_output_tokens_per_request": model.max_output_tokens,
            "request_timeout_seconds": model.request_timeout_seconds,
            "spending_budget": {"currency": "USD", "amount": str(model.budget_usd)},
            "max_requests": ceilings.model_requests,
            "max_audited_bytes": ceilings.model_audit_bytes,
        },
        "boundary": {
            "ip_network": False,
            "kernel_files_read_only": True,
            "git_database_mounted": False,
        },
        "publication": {
            "requires_exit_zero": True,
            "supported_objects": ["directory", "regular_file", "symlink"],
            "speculative_writes_discarded_on_failure": True,
        },
        # physics release 2: the seccomp filter, the fresh keyring, the per-life counts
        "sandbox": confinement.disclosure(),
    }
