"""The spec's field types and the rules more than one model shares: sizes, durations and
money parsed explicitly (``reconciler.spec.units``), paths, git branch names, the
strict base model, and the CPU share a ceiling's ``cpu`` must keep of its ``wall``.

Each type carries its JSON Schema for editors; the validator is the authority.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationInfo, WithJsonSchema

from reconciler.spec import units

__all__ = [
    "MAX_BYTES",
    "MAX_GENERATIONS",
    "MAX_REPLICAS",
    "MAX_SECONDS",
    "BranchName",
    "Duration",
    "Money",
    "PathText",
    "Size",
    "Strict",
    "branch_name_problem",
    "cpu_share",
]

# Upper bounds: beyond them a value is a typo, and the kernel's cgroup and tmpfs
# files (signed 64-bit) could not hold it anyway.
MAX_BYTES = (1 << 63) - 1
MAX_SECONDS = 366 * 86400
MAX_GENERATIONS = 1_000_000
MAX_REPLICAS = 10_000  # a member's index is at most 4 digits (reconciler.spec.sets)


class Strict(BaseModel):
    """Every spec model: unknown keys refused (a typo must not pass silently), no silent
    ``"5"`` -> 5, frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def cpu_share(value: int, info: ValidationInfo) -> int:
    """A ceiling's ``cpu`` validator: at least 1% of its ``wall`` (the quota cpu / wall)."""
    wall = info.data.get("wall")
    if isinstance(wall, int) and value * 100 < wall:
        raise ValueError(
            f"cpu {units.format_duration(value)} is less than 1% of wall "
            f"{units.format_duration(wall)}: the quota cpu / wall must be at least 1%"
        )
    return value


Size = Annotated[
    int,
    BeforeValidator(units.parse_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": units.SIZE_PATTERN},
            ],
            "description": "bytes, or K/M/G/T (= KiB/MiB/GiB/TiB, powers of 1024)",
        }
    ),
]
Duration = Annotated[
    int,
    BeforeValidator(units.parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": units.DURATION_PATTERN},
            ],
            "description": "whole seconds, or e.g. 600s, 10m, 1h, 1h30m",
        }
    ),
]
Money = Annotated[
    Decimal,
    BeforeValidator(units.parse_money),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": units.MONEY_PATTERN},
                {"type": "integer", "minimum": 0},
            ],
            "description": 'USD as a quoted decimal string, e.g. "1.00" (never a float)',
        }
    ),
]


def _to_path(value: Any) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"a path is a non-empty string, not {units.describe(value)}")
    if "\x00" in value:
        raise ValueError("a path cannot contain a NUL character")
    try:
        return Path(value).expanduser()
    except RuntimeError as error:  # "~nobody/x": no such user
        raise ValueError(f"cannot expand {value!r}: {error}") from error


PathText = Annotated[
    Path,
    BeforeValidator(_to_path),
    WithJsonSchema({"type": "string", "minLength": 1, "pattern": r"^[^\x00]*[^\x00\s][^\x00]*$"}),
]


def branch_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid git branch name (``git check-ref-format --branch``), or None."""
    if not name:
        return "a branch name cannot be empty"
    if name == "@":
        return "a branch name cannot be '@'"
    if name == "HEAD":
        return "a branch cannot be called HEAD"
    if name.startswith("-"):
        return "a branch name cannot start with '-'"
    if name.startswith("/") or name.endswith("/"):
        return "a branch name cannot start or end with '/'"
    if name.endswith("."):
        return "a branch name cannot end with '.'"
    if ".." in name:
        return "a branch name cannot contain '..'"
    if "@{" in name:
        return "a branch name cannot contain '@{'"
    for char in name:
        if ord(char) < 0x20 or ord(char) == 0x7F:
            return "a branch name cannot contain control characters"
        if char in " ~^:?*[\\":
            return f"a branch name cannot contain {char!r}"
    for component in name.split("/"):
        if not component:
            return "a branch name cannot contain '//' (an empty component)"
        if component.startswith("."):
            return f"a branch name component cannot start with '.' ({component!r})"
        if component.endswith(".lock"):
            return f"a branch name component cannot end with '.lock' ({component!r})"
    return None


def _branch(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"a branch name is a string, not {units.describe(value)}")
    problem = branch_name_problem(value)
    if problem:
        raise ValueError(f"{value!r} is not a valid git branch name: {problem}")
    return value


# branch_name_problem's rules for editors (the function is the authority; a test feeds both).
_BRANCH_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "pattern": r"^[^\x00-\x20\x7f~^:?*\[\\]+$",
    "not": {
        "anyOf": [
            {"enum": ["@", "HEAD"]},
            {"pattern": r"^-"},
            {"pattern": r"^/|/$"},
            {"pattern": r"\.$"},
            {"pattern": r"\.\."},
            {"pattern": r"@\{"},
            {"pattern": r"//"},
            {"pattern": r"(^|/)\."},
            {"pattern": r"\.lock(/|$)"},
        ]
    },
}
BranchName = Annotated[
    str | None,
    BeforeValidator(_branch),
    WithJsonSchema({"anyOf": [_BRANCH_SCHEMA, {"type": "null"}]}),
]


