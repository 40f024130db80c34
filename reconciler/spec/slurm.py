"""``spec.executor``: where apply runs a lineage's generations (not physics). Today one
executor, Slurm: its job fields and the extra sbatch options a spec may add (never
one ouro sets itself).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, WithJsonSchema, field_validator

from reconciler.spec.fieldtypes import MAX_BYTES, MAX_SECONDS, Duration, Size, Strict
from reconciler.spec.names import SBATCH_OPTION, SLURM_NAME, whole

__all__ = ["RESERVED_SBATCH_OPTIONS", "ExecutorSpec", "SlurmSpec", "sbatch_option"]

# sbatch options ouro sets itself for each job (an extra option may not override them).
RESERVED_SBATCH_OPTIONS = frozenset(
    {"time", "partition", "account", "cpus-per-task", "mem", "signal", "output", "error",
     "job-name", "array", "wrap", "open-mode", "requeue", "no-requeue"}
)


def sbatch_option(text: str) -> tuple[str, str | bool]:
    """``--name=value`` or ``--flag`` -> (name, value or True); ValueError says what is wrong."""
    match = whole(SBATCH_OPTION, text)
    if not match:
        raise ValueError(
            f"{text!r} is not an sbatch option: write --name=value or --flag (e.g. --qos=low, "
            "--constraint=skylake), one per item"
        )
    name = match.group(1)
    if name in RESERVED_SBATCH_OPTIONS:
        raise ValueError(
            f"--{name} is set by ouro itself: use the executor's own fields (partition, "
            "account, time, cpus, memory) instead"
        )
    value = match.group(2)
    return name, True if value is None else value[1:]


def _slurm_name(value: str | None) -> str | None:
    if value is not None and not whole(SLURM_NAME, value):
        raise ValueError(f"{value!r} is not a Slurm partition or account name")
    return value


def _sbatch_item(value: str) -> str:
    sbatch_option(value)
    return value


SbatchOption = Annotated[str, AfterValidator(_sbatch_item),
                         WithJsonSchema({"type": "string", "pattern": SBATCH_OPTION.pattern})]


class SlurmSpec(Strict):
    partition: str | None = Field(
        default=None, description="the partition (default: the cluster's)",
        json_schema_extra={"pattern": SLURM_NAME.pattern}
    )
    account: str | None = Field(default=None, description="the account to charge (default: yours)",
                                json_schema_extra={"pattern": SLURM_NAME.pattern})
    time: Duration = Field(
        default=3600,
        ge=60,
        le=MAX_SECONDS,
        description="time limit of one job; a job starts no generation that could not end "
        "(wall ceiling) before it, and is requeued for the rest",
    )
    cpus: int = Field(default=1, ge=1, le=4096, description="CPUs per job (--cpus-per-task)")
    memory: Size | None = Field(
        default=None, ge=1 << 20, le=MAX_BYTES, description="memory per job (--mem); "
        "default: the cluster's"
    )
    sbatch: list[SbatchOption] = Field(
        default_factory=list,
        description="extra sbatch options, one per item: --name=value or --flag",
    )

    @field_validator("partition", "account")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return _slurm_name(value)


class ExecutorSpec(Strict):
    slurm: SlurmSpec = Field(
        default_factory=SlurmSpec, description="jobs for `ouro apply --executor slurm`"
    )
