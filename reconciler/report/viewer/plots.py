"""Plots over generations, drawn server-side by matplotlib as SVG (no hand-made geometry).

Each plot is one metric of ``GenerationRow`` against the generation number; an
unknown value is a gap, never a zero. Deaths are marked. The SVG holds only
numbers and fixed labels: no organism text is drawn.
"""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reconciler.state.summaries import GenerationRow

__all__ = ["PLOTS", "Plot", "render_svg"]

_LOCK = threading.Lock()  # matplotlib's font and text caches are shared: one figure at a time


def _spend(row: GenerationRow) -> float | None:
    return float(row.spend_usd) if row.spend_usd is not None else None


def _mib(value: int | None) -> float | None:
    return value / (1 << 20) if value is not None else None


@dataclass(frozen=True)
class Plot:
    name: str
    title: str
    unit: str
    series: tuple[tuple[str, Callable[[GenerationRow], float | int | None]], ...]


PLOTS: dict[str, Plot] = {plot.name: plot for plot in (
    Plot("spend", "model spend per generation", "USD", (("spend", _spend),)),
    Plot("tokens", "tokens per generation", "tokens",
         (("in", lambda row: row.tokens_in), ("out", lambda row: row.tokens_out))),
    Plot("cpu", "CPU time per generation", "seconds", (("cpu", lambda row: row.cpu_seconds),)),
    Plot("memory", "peak memory per generation", "MiB",
         (("peak", lambda row: _mib(row.memory_peak_bytes)),)),
    Plot("size", "organism size", "KiB",
         (("organism.el", lambda row: row.organism_bytes / 1024
           if row.organism_bytes is not None else None),)),
)}


def _values(rows: Sequence[GenerationRow],
            pick: Callable[[GenerationRow], float | int | None]) -> list[float]:
    values = []
    for row in rows:
        value = pick(row)
        values.append(float(value) if value is not None else math.nan)
    return values


def render_svg(plot: Plot, rows: Sequence[GenerationRow]) -> bytes:
    """One plot as an SVG document (a 'no data' plot when nothing is known)."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    with _LOCK:
        figure = Figure(figsize=(6.4, 2.4), dpi=100, layout="constrained")
        FigureCanvasSVG(figure)
        axes = figure.add_subplot()
        numbers = [row.generation for row in rows]
        known = False
        for label, pick in plot.series:
            values = _values(rows, pick)
            if any(not math.isnan(value) for value in values):
                known = True
                axes.plot(numbers, values, label=label, linewidth=1.2,
                          marker="." if len(rows) <= 60 else None)
        deaths = [row.generation for row in rows if row.status == "died"]
        for index, number in enumerate(deaths):
            axes.axvline(number, color="#c0392b", alpha=0.35, linewidth=0.8,
                         label="death" if index == 0 else None)
        if not known:
            axes.text(0.5, 0.5, "no data recorded", transform=axes.transAxes,
                      ha="center", va="center", color="#777777")
        axes.set_xlim(0.5, max(1, len(rows)) + 0.5)
        axes.set_title(plot.title, fontsize=10)
        axes.set_xlabel("generation", fontsize=8)
        axes.set_ylabel(plot.unit, fontsize=8)
        axes.tick_params(labelsize=7)
        axes.grid(alpha=0.3)
        if len(plot.series) > 1 or deaths:
            axes.legend(fontsize=7, loc="best")
        out = io.BytesIO()
        figure.savefig(out, format="svg", metadata={"Date": None})
        return out.getvalue()
