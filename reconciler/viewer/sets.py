"""The set page: one metric of a LineageSet's members overlaid, with each matrix cell's
mean and spread. Read-only.

Rule: a member's metric is a number per generation, or a gap (never a zero): organism
size (KiB), cumulative model spend (USD), survival (the share of its generations so far
that did not die) or a probe's metric (``probe.<name>.<metric>``: a boolean is 0 or 1,
anything else not a number is a gap). A cell's statistics at generation N (n, mean,
median, the 95% bootstrap CI of the mean, min, max, alive) and every pair of cells'
difference are ``reconciler.report.statistics``'s, the same function as `ouro
compare`'s, under its survivor rule: a member whose history ends before N is not
alive there and out of n; a member's line stops at its last point. Who is a member,
in which cell, and who is orphaned comes from ``reconciler.engine.sets`` (the
viewer's lineages come with their membership); orphans are drawn and listed, marked,
never counted. Drawn by matplotlib as SVG, like every plot
(``reconciler.viewer.plots``): member lines have the SVG groups ``member-<i>`` (the
page's member order), cell means ``cell-mean-<j>`` and their CI bands ``cell-ci-<j>``,
with n written where it changes; names are drawn as glyph outlines, not text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from reconciler.report.sets import matrix_value
from reconciler.report.statistics import Comparison, MemberSeries, compare_at, series
from reconciler.report.words import plural
from reconciler.spec.sets import Membership
from reconciler.state.table import TableRow
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


def _fixed(metric: str) -> Callable[[Sequence[TableRow]], dict[int, float]]:
    def size(rows: Sequence[TableRow]) -> dict[int, float]:
        found = {}
        for row in rows:
            value = plots.PLOTS["size"].series[0][1](row)
            if value is not None:
                found[row.generation] = float(value)
        return found

    def spend(rows: Sequence[TableRow]) -> dict[int, float]:
        values, _clamped = plots._series(rows, plots._spend, cumulative=True)
        return {row.generation: value for row, value in zip(rows, values, strict=True)
                if not math.isnan(value)}

    def survival(rows: Sequence[TableRow]) -> dict[int, float]:
        found, survived = {}, 0
        for count, row in enumerate(rows, start=1):
            survived += row.value("status") != "died"
            found[row.generation] = survived / count
        return found
    return {"size": size, "spend": spend, "survival": survival}[metric]


def member_values(metric: str, rows: Sequence[TableRow]) -> dict[int, float]:
    """generation -> the member's value of ``metric`` (a gap: absent), from its rows of
    the per-generation table (``reconciler.state.table``): a fixed metric from generation
    1, a probe's from what it measured, the seed (row 0) included."""
    if metric in METRICS:
        return _fixed(metric)(plots.lived(rows))
    found = {}
    for row in rows:
        number_value = _number(row.value(metric))
        if number_value is not None:
            found[row.generation] = number_value
    return found


@dataclass(frozen=True)
class MemberView:
    name: str
    href: str
    member: Membership
    values: dict[int, float]
    generations: int | None = None  # its history's newest generation (None: unknown)

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

    @property
    def label(self) -> str:
        return self.name or "(one cell)"


def member_series(cells: Sequence[CellView]) -> list[MemberSeries]:
    """The cells' live members as the statistics read them (orphans are never counted)."""
    return [MemberSeries(member.name, cell.label,
                         member.generations if member.generations is not None
                         else max(member.values, default=None), member.values)
            for cell in cells for member in cell.live]


def newest(cells: Sequence[CellView]) -> int:
    """The newest generation any live member reached (the page's comparison is there)."""
    return max((m.generations if m.generations is not None else max(m.values, default=0)
                for cell in cells for m in cell.live), default=0)


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


def _format(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _interval(low: float | None, high: float | None) -> str:
    return "—" if low is None or high is None else f"[{low:.4g}, {high:.4g}]"


def _pairs(comparison: Comparison) -> list[dict[str, str]]:
    return [{"first": pair.first, "second": pair.second,
             "difference": _format(pair.difference),
             "ci": _interval(pair.ci_low, pair.ci_high), "p": _format(pair.p_value)}
            for pair in comparison.pairs]


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
    generation = newest(cells)
    comparison = compare_at(member_series(cells), generation)
    stats = {group.group: group for group in comparison.groups}
    rows = []
    for cell in cells:
        group = stats.get(cell.label)
        rows.append({
            "name": cell.label, "matrix": cell.matrix, "count": len(cell.live),
            "alive": str(group.alive) if group else "0", "n": str(group.n) if group else "0",
            "mean": _format(group.mean if group else None),
            "median": _format(group.median if group else None),
            "ci": _interval(group.ci_low, group.ci_high) if group else "—",
            "min": _format(group.minimum if group else None),
            "max": _format(group.maximum if group else None),
            "members": [{"name": m.name, "href": m.href, "orphaned": m.member.orphaned,
                         "last": _format(m.last) if m.last is not None else "—"}
                        for m in cell.members],
        })
    return {"set_name": set_name, "heading": heading, "metric": metric,
            "choices": choices, "plot": set_plot_href(set_name, metric.name),
            "cells": rows, "generation": generation, "pairs": _pairs(comparison),
            "rule": comparison.rule, "ci_method": comparison.ci_method,
            "resamples": comparison.resamples, "seed": comparison.seed,
            "test": comparison.test}


def _bands(axes: Any, cells: Sequence[CellView]) -> None:
    """Each cell's mean (thick) and its 95% CI band over generations, n written where it
    changes (``reconciler.report.statistics.series``)."""
    members = member_series(cells)
    points = series(members, range(0, newest(cells) + 1)) if members else []
    labels = [group.group for group in points[0].groups] if points else []
    for j, cell in enumerate(cells):
        if cell.label not in labels:
            continue
        at = labels.index(cell.label)
        found = [(p.generation, p.groups[at]) for p in points if p.groups[at].mean is not None]
        if not found:
            continue
        colour = f"C{j % 10}"
        numbers = [number for number, _ in found]
        means = [float(group.mean or 0.0) for _, group in found]
        axes.fill_between(numbers, [g.ci_low if g.ci_low is not None else m
                                    for (_, g), m in zip(found, means, strict=True)],
                          [g.ci_high if g.ci_high is not None else m
                           for (_, g), m in zip(found, means, strict=True)],
                          color=colour, alpha=0.15, linewidth=0, gid=f"cell-ci-{j}")
        axes.plot(numbers, means, color=colour, linewidth=2.2, gid=f"cell-mean-{j}",
                  label=cell.label.replace("$", r"\$"))
        shown = None
        for (number, group), mean in zip(found, means, strict=True):
            if group.n != shown:
                axes.annotate(f"n={group.n}", (number, mean), fontsize=7, color=colour,
                              textcoords="offset points", xytext=(2, 4))
                shown = group.n


def render_set_svg(metric: SetMetric, cells: Sequence[CellView]) -> bytes:
    """Every member's line (thin, to its last point and no further; an orphan's dashed),
    and per cell its mean (thick) with its 95% CI band, one colour per cell."""
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
        _bands(axes, cells)
        if not known:
            plots._no_data(axes)
        title = f"{metric.title}: members, each cell's mean and 95% CI".replace("$", r"\$")
        return plots._finish(figure, axes, plots.Plot(metric.name, title, metric.unit, ()),
                             width, known)
