"""The ceilings and model limits a generation ran under, read back from its observation.

Rule: pure. Every generation's observation records the ``constraints`` manifest the kernel
built from its ceilings and model limits (``kernel.base.config.constraints_manifest``) and
showed the organism; this is its inverse. A reproduction runs each generation under its
own recorded limits, and the result is checked by building the manifest again: what does
not come back exactly (a manifest this ouro cannot read) is ``LimitsUnreadable``, never a
guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from reconciler.kernel.base.config import (
    ENFORCEMENTS,
    Ceilings,
    ModelConfig,
    constraints_manifest,
)

__all__ = ["LimitsUnreadable", "recorded_limits"]

_SHIFTS = {"T": 40, "G": 30, "M": 20, "K": 10}
_COMPARED = ("generation", "filesystem", "model")  # the sandbox section is the kernel's


class LimitsUnreadable(ValueError):
    """A generation is reproduced only under the limits it ran under, read back whole."""


def _size(text: Any) -> int:
    """``format_memory``'s inverse: ``512M`` -> bytes, ``0`` -> 0."""
    value = str(text)
    shift = _SHIFTS.get(value[-1:], 0)
    return int(value[:-1] if shift else value) << shift


def recorded_limits(observation: Mapping[str, Any], replies: Path
                    ) -> tuple[Ceilings, ModelConfig]:
    """The ceilings and the (replay) model of a generation's observation, answering from
    ``replies``; ``LimitsUnreadable`` naming what does not read back."""
    constraints = observation.get("constraints")
    try:
        assert isinstance(constraints, dict)
        life, files, model = (constraints["generation"], constraints["filesystem"],
                              constraints["model"])
        backend = observation.get("ceiling_backend")
        ceilings = Ceilings(
            wall_seconds=int(life["wall_seconds"]),
            cpu_seconds=int(life["aggregate_cpu_seconds"]),
            memory_bytes=_size(life["memory_max"]), swap_bytes=_size(life["memory_swap_max"]),
            tasks=int(life["tasks_max"]), worktree_bytes=int(files["work_bytes"]),
            worktree_files=int(files["published_files"]), tmp_bytes=int(files["tmp_bytes"]),
            run_bytes=int(files["run_bytes"]),
            enforcement=backend if backend in ENFORCEMENTS else "auto",
            model_requests=int(model.get("max_requests", Ceilings.model_requests)),
            model_audit_bytes=int(model.get("max_audited_bytes", Ceilings.model_audit_bytes)))
        config = ModelConfig(
            provider="replay", name="replay", replay_dir=replies,
            max_output_tokens=int(model["max_output_tokens_per_request"]),
            max_prompt_bytes=int(model["max_prompt_bytes"]),
            request_timeout_seconds=int(model["request_timeout_seconds"]),
            budget_usd=Decimal(str(model["spending_budget"]["amount"])))
    except (AssertionError, KeyError, TypeError, ValueError, InvalidOperation) as error:
        raise LimitsUnreadable(f"its recorded constraints do not read ({error!r})") from error
    _check(constraints, constraints_manifest(ceilings, config))
    return ceilings, config


def _check(recorded: Mapping[str, Any], rebuilt: Mapping[str, Any]) -> None:
    for section in _COMPARED:
        was, now = recorded.get(section), rebuilt.get(section)
        if not isinstance(was, dict) or not isinstance(now, dict):
            raise LimitsUnreadable(f"its recorded constraints have no {section} section")
        for key, value in was.items():
            if now.get(key) != value:
                raise LimitsUnreadable(
                    f"its recorded constraints.{section}.{key} ({value!r}) does not come back "
                    f"from the ceilings read ({now.get(key)!r})")
