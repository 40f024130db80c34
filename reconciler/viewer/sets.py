"""The set page: one metric of a LineageSet's members overlaid, with each matrix cell's
mean and spread. Read-only.

Rule: a member's metric is a number per generation, or a gap (never a zero): organism
size (KiB), cumulative model spend (USD), survival (the share of its generations so far
that did not die) or a probe's metric (``probe.<name>.<metric>``: a boolean is 0 or 1,
anything else not a number is a gap). A cell's mean and spread (the population
standard deviation) at generation N are over the members that have a value at N. Who
is a member, in which cell, and who is orphaned comes from
``reconciler.engine.sets`` (the viewer's lineages come with their membership);
orphans are drawn and listed, marked, never counted in a cell's mean. Drawn by
matplotlib as SVG, like every plot (``reconciler.viewer.plots``): member lines have
the SVG groups ``member-<i>`` (the page's member order), cell means ``cell-mean-<j>``
and their spreads ``cell-spread-<j>``; names are drawn as glyph outlines, not text.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from reconciler.report.sets import matrix_value
from reconciler.report.words import plural
from reconciler.spec.sets import Membership
from reconciler.state.summaries import GenerationRow
from reconciler.viewer import plots

__all__ = ["METRICS", "CellView", "MemberView", "SetMetric", "cells_of", "member_values",
           "render_set_svg", "set_context", "set_href", "set_plot_href", "sets_of"]


@dataclass(frozen=True)
class SetMetric:
    name: str
    title: str
    unit: str


METRICS: dict[str, SetMetric] = {metric.name: metric for metric in (
    SetMetric("size", "organism size", "KiB"),
    SetMetric("spend", "cumulative model spend", "USD"),
    SetMetric("survival", "share of generations survived so far", "share"),
)}
PROBE_PREFIX = "probe."


def set_href(set_name: str, metric: str | None = None) -> str:
    href = "/set/" + quote(set_name, safe="")
    return href if metric is None else f"{href}?metric={quote(metric, safe='')}"


def set_plot_href(set_name: str, metric: str) -> str:
    return f"/set-plot/{quote(set_name, safe='')}/{quote(metric, safe='')}.svg"


def metric_of(name: str, probe_columns: Sequence[str]) -> SetMetric | None:
    """The metric ``name`` names: a fixed one, or a probe column a member has."""
    if name in METRICS:
        return METRICS[name]
    if name.startswith(PROBE_PREFIX) and name in probe_columns:
        return SetMetric(name, name, "value")
    return None


def _number(value: Any) -> float | None:
    """A probe's value as a number: a boolean as 0 or 1; anything else not a number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        number, _cut = plots._clamped(value)
        return None if math.isnan(number) else number
    return None


def _fixed(metric: str) -> Callable[[Sequence[GenerationRow]], dict[int, float]]:
    def size(rows: Sequence[GenerationRow]) -> dict[int, float]:
        return {row.generation: row.organism_bytes / 1024 for row in rows
                if row.organism_bytes is not None}

    def spend(rows: Sequence[GenerationRow]) -> dict[int, float]:
        values, _clamped = plots._series(rows, plots._spend, cumulative=True)
        return {row.generation: value for row, value in zip(rows, values, strict=True)
                if not math.isnan(value)}

    def survival(rows: Sequence[GenerationRow]) -> dict[int, float]:
        found, survived = {}, 0
        for count, row in enumerate(rows, start=1):
            survived += row.status != "died"
            found[row.generation] = survived / count
        return found
    return {"size": size, "spend": spend, "survival": survival}[metric]


def member_values(metric: str, rows: Sequence[GenerationRow],
                  probe_values: Mapping[int, Any]) -> dict[int, float]:
    """generation -> the member's value of ``metric`` (a gap: absent); ``probe_values``:
    a probe metric's values by generation (``state.probes.ProbeTable.values[metric]``)."""
    if metric in METRICS:
        return _fixed(metric)(rows)
    found = {}
    for number, value in probe_values.items():
        number_value = _number(value)
        if number_value is not None:
            found[number] = number_value
    return found


@dataclass(frozen=True)
class MemberView:
    name: str
    href: str
    member: Membership
    values: dict[int, float]

    @property
    def last(self) -> float | None:
        return self.values[max(self.values)] if self.values else None


@dataclass(frozen=True)
class CellView:
    """A cell's members (orphans included, marked) and its live members' statistics."""

    name: str | None
    matrix: str  # its values as text ("no longer in the set": a removed value's cell)
    members: list[MemberView]

    @property
    def live(self) -> list[MemberView]:
        return [m for m in self.members if not m.member.orphaned]

    def mean_and_spread(self) -> dict[int, tuple[float, float, int]]:
        """generation -> (mean, population standard deviation, members with a value)."""
        found: dict[int, list[float]] = {}
        for member in self.live:
            for number, value in member.values.items():
                found.setdefault(number, []).append(value)
        return {number: (statistics.fmean(values), statistics.pstdev(values), len(values))
                for number, values in sorted(found.items())}

    def last(self) -> tuple[float, float, int] | None:
        """The mean, spread and count of the live members' last values (None: none)."""
        values = [m.last for m in self.live if m.last is not None]
        if not values:
            return None
        return statistics.fmean(values), statistics.pstdev(values), len(values)


def sets_of(members: Mapping[str, Membership | None]) -> dict[str, dict[str, int]]:
    """set -> its counts (live members, their matrix cells, orphans), in the order the
    lineages come."""
    found: dict[str, dict[str, int]] = {}
    cells: dict[str, set[str | None]] = {}
    for member in members.values():
        if member is None:
            continue
        counts = found.setdefault(member.set_name, {"members": 0, "cells": 0, "orphaned": 0})
        if member.orphaned:
            counts["orphaned"] += 1
            continue
        counts["members"] += 1
        if member.cell is not None:
            cells.setdefault(member.set_name, set()).add(member.cell)
            counts["cells"] = len(cells[member.set_name])
    return found


def cells_of(members: Sequence[MemberView]) -> list[CellView]:
    """The members by cell, in the order they come (``engine.sets.grouped``'s)."""
    found: dict[str | None, list[MemberView]] = {}
    for member in members:
        found.setdefault(member.member.cell, []).append(member)
    out = []
    for cell, mine in found.items():
        values = next((m.member.matrix for m in mine if m.member.matrix), {})
        text = (", ".join(f"{key}={matrix_value(value)}" for key, value in values.items())
                if values else "no longer in the set" if cell is not None else "")
        out.append(CellView(cell, text, mine))
    return out


def _format(value: float) -> str:
    return f"{value:.4g}"


def set_context(set_name: str, metric: SetMetric, cells: Sequence[CellView],
                probe_columns: Sequence[str]) -> dict[str, Any]:
    """The set page's data: the metrics to choose from, the plot, each cell's members
    and its mean ± spread of the members' last values."""
    live = sum(len(cell.live) for cell in cells)
    orphans = sum(len(cell.members) - len(cell.live) for cell in cells)
    named = [cell for cell in cells if cell.name is not None]
    heading = (f"{plural(live, 'member')}"
               + (f" in {plural(len(named), 'cell')}" if named else "")
               + (f", {orphans} orphaned" if orphans else ""))
    choices = [(name, item.title, set_href(set_name, name), name == metric.name)
               for name, item in METRICS.items()]
    choices += [(column, column, set_href(set_name, column), column == metric.name)
                for column in probe_columns]
    rows = []
    for cell in cells:
        last = cell.last()
        rows.append({
            "name": cell.name or "(one cell)", "matrix": cell.matrix,
            "count": len(cell.live),
            "mean": _format(last[0]) if last else "—",
            "spread": _format(last[1]) if last else "—",
            "members": [{"name": m.name, "href": m.href, "orphaned": m.member.orphaned,
                         "last": _format(m.last) if m.last is not None else "—"}
                        for m in cell.members],
        })
    return {"set_name": set_name, "heading": heading, "metric": metric,
            "choices": choices, "plot": set_plot_href(set_name, metric.name),
            "cells": rows}


def render_set_svg(metric: SetMetric, cells: Sequence[CellView]) -> bytes:
    """Every member's line (thin; an orphan's dashed), and per cell its mean (thick) and
    mean ± spread (a band), one colour per cell."""
    with plots._LOCK:
        figure, axes = plots._figure()
        known, index, width = False, 0, 0
        for j, cell in enumerate(cells):
            colour = f"C{j % 10}"
            for member in cell.members:
                numbers = sorted(member.values)
                width = max([width, *numbers])
                if numbers:
                    known = True
                    axes.plot(numbers, [member.values[n] for n in numbers], color=colour,
                              alpha=0.35, linewidth=0.8, gid=f"member-{index}",
                              linestyle="--" if member.member.orphaned else "-")
                index += 1
            stats = cell.mean_and_spread()
            if stats:
                numbers = list(stats)
                means = [stats[n][0] for n in numbers]
                spreads = [stats[n][1] for n in numbers]
                axes.fill_between(numbers, [m - s for m, s in zip(means, spreads, strict=True)],
                                  [m + s for m, s in zip(means, spreads, strict=True)],
                                  color=colour, alpha=0.15, linewidth=0, gid=f"cell-spread-{j}")
                axes.plot(numbers, means, color=colour, linewidth=2.2, gid=f"cell-mean-{j}",
                          label=(cell.name or "mean").replace("$", r"\$"))
        if not known:
            plots._no_data(axes)
        title = f"{metric.title}: members, each cell's mean ± spread".replace("$", r"\$")
        return plots._finish(figure, axes, plots.Plot(metric.name, title, metric.unit, ()),
                             width, known)
