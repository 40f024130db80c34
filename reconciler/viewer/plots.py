"""Plots over generations, drawn server-side by matplotlib as SVG (no hand-made geometry).

Rule: a plot renders rows of the one per-generation table (``reconciler.state.table``,
the rows `ouro export` and `ouro compare` render), reading each column by its name
(``TableRow.value``); nothing here reads a lineage's records. Row 0 (the seed) is not
drawn: the x axis starts at a lineage's first generation.

Each plot is one column (or two, as tokens in and out) against the generation number; an
unknown value is a gap, never a zero (a cumulative plot adds the known values and
keeps its total across a gap). Deaths and model failures are marked (vertical lines
whose SVG groups are ``death-N`` and ``model-failure-N``). The fleet's plots draw one
line per lineage (``render_fleet_svg``). A probe's metric is plotted the same way
(``render_probe_svg``: its booleans as 0 and 1, strings not at all), with that
probe's failures marked too (``probe-failure-N``, the table's ``probe_failure.<name>``),
and overlaid across the fleet (``render_fleet_probe_svg``). The SVG holds only numbers,
fixed labels, lineage names and probe metric names (drawn as glyph outlines, not text):
no organism text is drawn. An absurd value (beyond ``PLOT_MAX``, or too large for a
float) is drawn at the bound, marked with a red x and counted in a note (a forged
10**4000 tokens was a 500).

The x axis is the absolute generation, the table's ``absolute_generation``: a fork's
generation N is drawn at its parent's generation G + N, so a fork lines up with its
parent in the fleet's plots; when an ancestor is not shown (the table's absolute
generation is unknown) it is drawn from the generation its parent recorded
(``drawn_from``). The y axis starts at 0 when every value drawn is non-negative (a
flat zero is not drawn around a negative axis).
"""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from reconciler.state.table import FAILURE_PREFIX, Descent, LineageTable, TableRow

__all__ = ["FLEET_PLOTS", "PLOTS", "Plot", "drawn_from", "lived", "render_fleet_probe_svg",
           "render_fleet_svg", "render_probe_svg", "render_svg"]

_LOCK = threading.Lock()  # matplotlib's font and text caches are shared: one figure at a time
PLOT_MAX = 1e12  # beyond this a value is absurd in every plot (tokens, USD, seconds, MiB)

Pick = Callable[[TableRow], float | int | None]


def drawn_from(descent: Descent) -> int:
    """Where a lineage's generation 0 sits on the x axis: its seed's absolute generation,
    or (an ancestor not shown) the parent's generation it was born from."""
    if descent.seed_generation is not None:
        return descent.seed_generation
    return descent.parent_generation or 0


def _x(row: TableRow) -> int:
    return drawn_from(row.descent) + row.generation


def lived(rows: Sequence[TableRow]) -> list[TableRow]:
    """The rows of generations that ran (row 0, the seed, left out)."""
    return [row for row in rows if row.generation >= 1]


def _number(column: str) -> Pick:
    def pick(row: TableRow) -> float | int | None:
        value = row.value(column)
        return value if isinstance(value, int | float) and not isinstance(value, bool) \
            else None
    return pick


def _spend(row: TableRow) -> float | None:
    text = row.value("spend_usd")
    try:
        return float(Decimal(text)) if isinstance(text, str) else None
    except (InvalidOperation, ValueError, OverflowError):
        return None


def _scaled(column: str, unit: int) -> Pick:
    def pick(row: TableRow) -> float | None:
        value = _number(column)(row)
        return value / unit if value is not None else None
    return pick


@dataclass(frozen=True)
class Plot:
    name: str
    title: str
    unit: str
    series: tuple[tuple[str, Pick], ...]
    cumulative: bool = False  # each point is the total up to that generation


PLOTS: dict[str, Plot] = {plot.name: plot for plot in (
    Plot("spend", "model spend per generation", "USD", (("spend", _spend),)),
    Plot("cumulative-spend", "cumulative model spend", "USD", (("spend", _spend),),
         cumulative=True),
    Plot("tokens", "tokens per generation", "tokens",
         (("in", _number("tokens_in")), ("out", _number("tokens_out")))),
    Plot("cpu", "CPU time per generation", "seconds", (("cpu", _number("cpu_seconds")),)),
    Plot("memory", "peak memory per generation", "MiB",
         (("peak", _scaled("memory_peak_bytes", 1 << 20)),)),
    Plot("size", "organism size", "KiB", (("organism.el", _scaled("organism_bytes", 1024)),)),
)}
# The fleet page's plots: one line per lineage (the plot's first series).
FLEET_PLOTS: tuple[str, ...] = ("cumulative-spend", "size", "cpu")


def _clamped(value: float | int | None) -> tuple[float, bool]:
    """A plottable number, and whether it was beyond ±PLOT_MAX (then it is ±PLOT_MAX)."""
    if value is None:
        return math.nan, False
    try:
        number = float(value)
    except (OverflowError, ValueError, TypeError):  # an int of 4,000 digits, say
        number = math.inf if isinstance(value, int) and value > 0 else -math.inf
    if math.isnan(number):
        return number, False
    if abs(number) > PLOT_MAX:
        return math.copysign(PLOT_MAX, number), True
    return number, False


def _series(rows: Sequence[TableRow], pick: Pick,
            cumulative: bool = False) -> tuple[list[float], list[int]]:
    """The series' values (absurd ones clamped), and the indexes of those clamped."""
    values: list[float] = []
    clamped: list[int] = []
    total = 0.0
    for index, row in enumerate(rows):
        value, cut = _clamped(pick(row))
        if math.isnan(value):
            values.append(math.nan)
            continue
        total, cut_total = _clamped(total + value)
        values.append(total if cumulative else value)
        if cut or (cumulative and cut_total):
            clamped.append(index)
    return values, clamped


def _flag(axes: Any, numbers: Sequence[int], values: Sequence[float],
          clamped: Sequence[int]) -> int:
    """Clamped values marked with a red x; how many there were."""
    if clamped:
        axes.plot([numbers[i] for i in clamped], [values[i] for i in clamped],
                  linestyle="none", marker="x", color="#c0392b", markersize=7)
    return len(clamped)


def _absurd_note(axes: Any, count: int) -> None:
    if count:
        axes.text(0.01, 0.98, f"{count} absurd value(s) beyond ±{PLOT_MAX:.0e} shown "
                  "clamped (x)", transform=axes.transAxes, ha="left", va="top",
                  fontsize=7, color="#c0392b")


def _figure() -> tuple[Any, Any]:
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 2.4), dpi=100, layout="constrained")
    FigureCanvasSVG(figure)
    return figure, figure.add_subplot()


def _floor(axes: Any) -> None:
    """The y axis from 0 when nothing drawn is negative."""
    drawn = [float(y) for line in axes.get_lines() for y in line.get_ydata()
             if isinstance(y, int | float) and math.isfinite(y)]
    if drawn and min(drawn) >= 0:
        axes.set_ylim(bottom=0)


def _finish(figure: Any, axes: Any, plot: Plot, width: int, legend: bool,
            start: int = 0) -> bytes:
    """``width`` generations after ``start`` (the x axis: absolute generations)."""
    axes.set_xlim(start + 0.5, start + max(1, width) + 0.5)
    _floor(axes)
    axes.set_title(plot.title, fontsize=10)
    axes.set_xlabel("generation", fontsize=8)
    axes.set_ylabel(plot.unit, fontsize=8)
    axes.tick_params(labelsize=7)
    axes.grid(alpha=0.3)
    if legend:
        axes.legend(fontsize=7, loc="best")
    out = io.BytesIO()
    figure.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def _marks(axes: Any, rows: Sequence[TableRow]) -> bool:
    """Deaths and model failures as vertical lines; whether there was any."""
    deaths = [_x(row) for row in rows if row.value("status") == "died"]
    failures = [_x(row) for row in rows if row.value("model_failure") is not None]
    for index, number in enumerate(deaths):
        axes.axvline(number, color="#c0392b", alpha=0.35, linewidth=0.8,
                     label="death" if index == 0 else None, gid=f"death-{number}")
    for index, number in enumerate(failures):
        axes.axvline(number, color="#8e44ad", alpha=0.6, linewidth=1.0, linestyle="--",
                     label="model failure" if index == 0 else None,
                     gid=f"model-failure-{number}")
    return bool(deaths or failures)


def _no_data(axes: Any) -> None:
    axes.text(0.5, 0.5, "no data recorded", transform=axes.transAxes,
              ha="center", va="center", color="#777777")


def _start(rows: Sequence[TableRow]) -> int:
    """The x axis's generation before the first drawn (the lineage's generation 0)."""
    return drawn_from(rows[0].descent) if rows else 0


def render_svg(plot: Plot, table: LineageTable) -> bytes:
    """One plot of a lineage as an SVG document (a 'no data' plot when nothing is known)."""
    rows = lived(table.rows)
    with _LOCK:
        figure, axes = _figure()
        numbers = [_x(row) for row in rows]
        known, absurd = False, 0
        for label, pick in plot.series:
            values, clamped = _series(rows, pick, plot.cumulative)
            if any(not math.isnan(value) for value in values):
                known = True
                axes.plot(numbers, values, label=label, linewidth=1.2,
                          marker="." if len(rows) <= 60 else None)
            absurd += _flag(axes, numbers, values, clamped)
        _absurd_note(axes, absurd)
        marked = _marks(axes, rows)
        if not known:
            _no_data(axes)
        return _finish(figure, axes, plot, len(rows), len(plot.series) > 1 or marked,
                       drawn_from(table.descent))


def _span(lineages: Sequence[LineageTable]) -> tuple[int, int]:
    """The first generation before the x axis, and its width, for the lineages drawn."""
    firsts = [drawn_from(lineage.descent) for lineage in lineages]
    ends = [first + len(lived(lineage.rows)) for first, lineage in zip(firsts, lineages,
                                                                      strict=True)]
    start = min(firsts, default=0)
    return start, max(ends, default=0) - start


def render_fleet_svg(plot: Plot, lineages: Sequence[LineageTable]) -> bytes:
    """One plot across the fleet: a line per lineage (its name in the legend), a fork's
    from its parent's generation (the module rule)."""
    pick = plot.series[0][1]
    with _LOCK:
        figure, axes = _figure()
        known, absurd = False, 0
        for index, lineage in enumerate(lineages):
            rows = lived(lineage.rows)
            values, clamped = _series(rows, pick, plot.cumulative)
            numbers = [_x(row) for row in rows]
            absurd += _flag(axes, numbers, values, clamped)
            if any(not math.isnan(value) for value in values):
                known = True
                # a name is drawn as glyph outlines; "$" would start matplotlib's mathtext
                axes.plot(numbers, values, label=_label(lineage.name),
                          linewidth=1.2, marker="." if len(rows) <= 60 else None,
                          gid=f"lineage-{index}")
        _absurd_note(axes, absurd)
        if not known:
            _no_data(axes)
        start, width = _span(lineages)
        return _finish(figure, axes, plot, width, known, start)


def _probe_number(value: Any) -> float | int | None:
    """A probe metric as plotted: a boolean as 0 or 1, a string (or anything else) not."""
    if isinstance(value, bool):
        return int(value)
    return value if isinstance(value, int | float) else None


def _label(text: str) -> str:
    """Text matplotlib draws as glyphs: "$" would start its mathtext."""
    return text.replace("$", r"\$")


def _probe_failures(axes: Any, rows: Sequence[TableRow], probe: str | None) -> bool:
    """The probe's failures (the table's ``probe_failure.<name>``) as dotted vertical
    lines; whether there was any."""
    failed = [] if probe is None else [
        _x(row) for row in rows if row.value(FAILURE_PREFIX + probe) is not None]
    for index, number in enumerate(failed):
        axes.axvline(number, color="#d35400", alpha=0.8, linewidth=1.0, linestyle=":",
                     label="probe failure" if index == 0 else None,
                     gid=f"probe-failure-{number}")
    return bool(failed)


def render_probe_svg(column: str, table: LineageTable) -> bytes:
    """One probe metric (``probe.<name>.<metric>``) over the lineage's generations, its
    deaths, model failures and the probe's failures marked."""
    plot = Plot(column, _label(column), "value", ())
    rows = lived(table.rows)
    with _LOCK:
        figure, axes = _figure()
        series, clamped = _series(rows, lambda row: _probe_number(row.value(column)))
        numbers = [_x(row) for row in rows]
        known = any(not math.isnan(value) for value in series)
        if known:
            axes.plot(numbers, series, label=_label(column.split(".", 2)[-1]), linewidth=1.2,
                      marker="." if len(rows) <= 60 else None, gid="probe-metric")
        _absurd_note(axes, _flag(axes, numbers, series, clamped))
        marked = _marks(axes, rows)
        failed = _probe_failures(axes, rows, table.probes.probe_of.get(column))
        if not known:
            _no_data(axes)
        return _finish(figure, axes, plot, len(rows), marked or failed,
                       drawn_from(table.descent))


def render_fleet_probe_svg(column: str, lineages: Sequence[LineageTable]) -> bytes:
    """One probe metric across the fleet: a line per lineage, a fork's from its parent's
    generation (as render_fleet_svg's)."""
    plot = Plot(column, _label(f"{column}, by lineage"), "value", ())
    with _LOCK:
        figure, axes = _figure()
        known, absurd = False, 0
        for index, lineage in enumerate(lineages):
            rows = lived(lineage.rows)
            series, clamped = _series(rows, lambda row: _probe_number(row.value(column)))
            numbers = [_x(row) for row in rows]
            absurd += _flag(axes, numbers, series, clamped)
            if any(not math.isnan(value) for value in series):
                known = True
                axes.plot(numbers, series, label=_label(lineage.name), linewidth=1.2,
                          marker="." if len(rows) <= 60 else None, gid=f"lineage-{index}")
        _absurd_note(axes, absurd)
        if not known:
            _no_data(axes)
        start, width = _span(lineages)
        return _finish(figure, axes, plot, width, known, start)
