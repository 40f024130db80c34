"""``spec.from``: the model of a fork's parent, by name or as a set's member. Its rules
(which lineage, what no plan can change) are the loader's: ``reconciler.spec.fork_parents``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from reconciler.spec.fieldtypes import MAX_GENERATIONS, MAX_REPLICAS, Strict
from reconciler.spec.names import DNS_LABEL, whole

__all__ = ["ForkSpec"]


class ForkSpec(Strict):
    """``spec.from``: the lineage is born as a fork of another lineage's generation: one
    named by ``lineage``, or a set's member named by ``set``, ``cell`` and ``replica``
    (the loader finds its name among the run's members: ``reconciler.spec.fork_parents``)."""

    lineage: str = Field(
        default="",
        description="the parent lineage's name (a spec of this run, else <state dir>/NAME); "
        "or leave it out and name a set's member with set, cell and replica",
        json_schema_extra={"pattern": DNS_LABEL.pattern},
    )
    set: str | None = Field(
        default=None, description="the parent's LineageSet (a spec of this run), instead of "
        "its member's name", json_schema_extra={"pattern": DNS_LABEL.pattern})
    cell: dict[str, Any] | None = Field(
        default=None, description="with set: the cell's matrix values, by matrix key or a "
        "field path inside one (e.g. {model.name: steady}); enough of them to name one cell")
    replica: int | None = Field(
        default=None, ge=0, le=MAX_REPLICAS - 1,
        description="with set: the member's replica index in its cell (0, 1, ...)")
    generation: int = Field(
        ge=1, le=MAX_GENERATIONS,
        description="the parent's generation whose committed tree is the seed (not a death)")
    kernel: Literal["running", "parent"] = Field(
        default="running",
        description="running: born under this ouro's kernel (new physics); parent: under "
        "the parent's pinned kernel (a replay with identical physics)")

    @field_validator("lineage")
    @classmethod
    def _parent_name(cls, value: str) -> str:
        if not whole(DNS_LABEL, value):
            raise ValueError(f"{value!r} is not a lineage name (1-63 lowercase letters, "
                             "digits and '-'): name the parent lineage, e.g. scribe")
        return value

    @field_validator("set")
    @classmethod
    def _set_name(cls, value: str | None) -> str | None:
        if value is not None and not whole(DNS_LABEL, value):
            raise ValueError(f"{value!r} is not a set's name (1-63 lowercase letters, digits "
                             "and '-')")
        return value

    @model_validator(mode="after")
    def _one_parent(self) -> ForkSpec:
        if self.set is None:
            if not self.lineage:
                raise ValueError("name the parent: lineage: NAME, or a set's member with set, "
                                 "cell and replica")
            if self.cell is not None or self.replica is not None:
                raise ValueError("cell and replica name a member of a set: add set: NAME (or "
                                 "remove them)")
        elif self.lineage:
            raise ValueError("name the parent once: lineage, or set with cell and replica, "
                             "not both")
        elif self.replica is None:
            raise ValueError("with set, replica says which member of the cell (0, 1, ...)")
        return self

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A fork by name dumps as before ``set`` existed (its spec digest unchanged)."""
        dumped: dict[str, Any] = handler(self)
        for key in ("set", "cell", "replica"):
            if dumped.get(key) is None:
                dumped.pop(key, None)
        return dumped
