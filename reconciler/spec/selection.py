"""A LineageSet's ``spec.selection``: opt-in selection among its members, outside every
life (docs/selection.md). The model and the rules the model alone cannot say. Pure.

Rule: selection is the experimenter's, declared here and decided by the control plane
(``reconciler.plan.selection``); the kernel never judges an organism and nothing here
reaches it. A set without ``selection`` is planned and run exactly as before.

An epoch is ``every`` generations of every living member; ``every`` is the template's
``generations`` (each member's own spec: an epoch is one run of it). ``by`` names a
per-generation column of the table (``reconciler.state.table``): ``probe.<name>.<metric>``
of a probe the template declares, or one of ``NUMERIC_COLUMNS``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from reconciler.spec.fieldtypes import Strict
from reconciler.spec.names import METRIC_NAME, PROBE_NAME, whole

__all__ = [
    "MAX_EPOCHS",
    "METHODS",
    "NUMERIC_COLUMNS",
    "DescriptorSpec",
    "MapElitesSpec",
    "SelectionSpec",
    "TournamentSpec",
    "column_problem",
    "selection_problems",
]

MAX_EPOCHS = 10_000
NAME_LIMIT = 63  # a lineage name is a DNS label
MAX_BINS = 1_000
Method = Literal["truncation", "tournament", "map-elites"]
METHODS: tuple[str, ...] = ("truncation", "tournament", "map-elites")
# The summary's numeric per-generation columns (reconciler.state.summaries.GenerationRow)
# a selection may rank by; probe columns are the other choice.
NUMERIC_COLUMNS: tuple[str, ...] = (
    "organism_bytes", "organism_added", "organism_deleted", "paths_changed", "model_calls",
    "tokens_in", "tokens_out", "cpu_seconds", "memory_peak_bytes", "wall_seconds",
)


class TournamentSpec(Strict):
    size: int = Field(ge=2, le=1_000, description="members drawn into each tournament")


class DescriptorSpec(Strict):
    by: str = Field(description="a per-generation column (as selection.by) binned here")
    bins: list[float] = Field(min_length=1, max_length=MAX_BINS,
                              description="increasing edges: n edges make n + 1 bins")

    @field_validator("bins", mode="before")
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [float(v) if isinstance(v, int) and not isinstance(v, bool) else v
                    for v in value]
        return value

    @field_validator("bins")
    @classmethod
    def _increasing(cls, value: list[float]) -> list[float]:
        for before, after in itertools.pairwise(value):
            if not after > before:
                raise ValueError("bin edges increase strictly (e.g. [1000, 2000, 4000])")
        return value


class MapElitesSpec(Strict):
    descriptors: list[DescriptorSpec] = Field(
        min_length=1, max_length=4, description="the columns that place a member in a bin")


class SelectionSpec(Strict):
    """Opt-in selection among a set's members (docs/selection.md)."""

    every: int = Field(ge=1, description="generations per epoch: the template's generations")
    epochs: int = Field(ge=1, le=MAX_EPOCHS, description="how many epochs the set runs")
    by: str = Field(description="the fitness: a per-generation column, e.g. probe.size.bytes")
    lowest: bool = Field(default=False, description="lower is better (default: higher)")
    method: Method = Field(default="truncation", description="truncation | tournament | "
                           "map-elites")
    keep: int | None = Field(default=None, ge=1, description="truncation: survivors per epoch")
    tournament: TournamentSpec | None = None
    map_elites: MapElitesSpec | None = Field(default=None, alias="map-elites")
    seed: int = Field(default=0, ge=0, le=2**63 - 1,
                      description="every random choice comes from it (with the epoch)")


def column_problem(column: str, probes: set[str]) -> str | None:
    """Why ``column`` is no column a selection can rank by (None: it is one)."""
    head, probe, metric = [*column.split(".", 2), "", ""][:3]
    if head == "probe" and whole(PROBE_NAME, probe) and whole(METRIC_NAME, metric):
        if probe in probes:
            return None
        declared = ", ".join(sorted(probes)) or "none"
        return (f"{column!r} names probe {probe!r}, which the template does not "
                f"declare (its probes: {declared}): add it to spec.template.probes")
    if column in NUMERIC_COLUMNS:
        return None
    return (f"{column!r} is no per-generation number: use probe.<name>.<metric> of a "
            f"template probe or one of {', '.join(NUMERIC_COLUMNS)}")


def _probe_names(template: Mapping[str, Any]) -> set[str]:
    probes = template.get("probes")
    if not isinstance(probes, list):
        return set()
    return {p["name"] for p in probes if isinstance(p, dict) and isinstance(p.get("name"), str)}


def selection_problems(selection: SelectionSpec, template: Mapping[str, Any],
                       members: int, set_name: str) -> list[tuple[tuple[Any, ...], str, str]]:
    """What a valid ``selection`` may still not say of this set: (place under
    spec.selection, field, message). ``members``: the set's size per epoch."""
    found: list[tuple[tuple[Any, ...], str, str]] = []
    field = "spec.selection"
    longest = f"{set_name}-e{selection.epochs}-{members - 1}"
    if len(longest) > NAME_LIMIT:
        found.append((("epochs",), f"{field}.epochs",
                      f"new members are named <set>-e<epoch>-<i> ({longest}: {len(longest)} "
                      f"characters), at most {NAME_LIMIT}: shorten the set's name"))
    generations = template.get("generations")
    if isinstance(generations, int) and generations != selection.every:
        found.append((("every",), f"{field}.every",
                       f"an epoch is one run of each member's spec: every must equal "
                       f"spec.template.generations ({generations}), not {selection.every}"))
    probes = _probe_names(template)
    said = column_problem(selection.by, probes)
    if said:
        found.append((("by",), f"{field}.by", said))
    method = selection.method
    if method == "truncation":
        if selection.keep is None:
            found.append((("method",), f"{field}.keep", "truncation keeps the best `keep` "
                           "members each epoch: give keep (e.g. keep: 4)"))
        elif selection.keep > members:
            found.append((("keep",), f"{field}.keep", f"keep {selection.keep} is more than "
                           f"the set's {members} member{'s' * (members != 1)}: lower it"))
    elif selection.keep is not None:
        found.append((("keep",), f"{field}.keep", f"keep is truncation's; method {method} "
                       "does not use it: remove it"))
    if method == "tournament" and selection.tournament is None:
        found.append((("method",), f"{field}.tournament",
                      "tournament draws `size` members per tournament: give "
                      "tournament: {size: 3}"))
    if method != "tournament" and selection.tournament is not None:
        found.append((("tournament",), f"{field}.tournament",
                      f"method is {method}: remove tournament or set method: tournament"))
    if method == "map-elites":
        if selection.map_elites is None:
            found.append((("method",), f"{field}.map-elites",
                          "map-elites bins members by descriptors: give map-elites: "
                          "{descriptors: [{by: <column>, bins: [..]}]}"))
        else:
            for i, descriptor in enumerate(selection.map_elites.descriptors):
                said = column_problem(descriptor.by, probes)
                if said:
                    found.append((("map-elites", "descriptors", i, "by"),
                                  f"{field}.map-elites.descriptors[{i}].by", said))
    elif selection.map_elites is not None:
        found.append((("map-elites",), f"{field}.map-elites",
                      f"method is {method}: remove map-elites or set method: map-elites"))
    return found
