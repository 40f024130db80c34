"""`ouro compare --plot`: the comparison over generations as a publication figure.

Rule: draws what ``reconciler.report.statistics.series`` computed, nothing else: each
group's mean as a line and its confidence interval as a band (SVG groups ``mean-<j>``
and ``ci-band-<j>``, one per group, in the comparison's group order), ``n`` written at
the first point and wherever it changes, labelled axes, a legend, and the rules in a
footnote (survivor rule, CI method and seed). matplotlib's object API (no pyplot, no
global state); the format is the file's suffix: ``.svg`` and ``.pdf`` (vector), or
``.png``. The file carries no date, so the same comparison gives the same bytes.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from pathlib import Path

from reconciler.report.statistics import Comparison

__all__ = ["FORMATS", "figure_bytes", "format_of"]

FORMATS = {".svg": "svg", ".pdf": "pdf", ".png": "png"}
_METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None},
             "png": {"Software": None}}


def format_of(path: Path) -> str | None:
    """The figure format a file name asks for (None: no format we write)."""
    return FORMATS.get(path.suffix.lower())


def _label(text: str) -> str:
    return text.replace("$", r"\$")  # never mathtext: a name is drawn as written


def figure_bytes(points: Sequence[Comparison], metric: str, fmt: str) -> bytes:
    """The figure of ``points`` (one comparison per generation, groups in the same order)
    in ``fmt`` (svg, pdf or png)."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(7.0, 4.4), layout="constrained")
    axes = figure.add_subplot()
    names = [group.group for group in points[0].groups] if points else []
    for j, name in enumerate(names):
        colour = f"C{j % 10}"
        found = [(point.generation, point.groups[j]) for point in points
                 if point.groups[j].mean is not None]
        if not found:
            continue
        xs = [generation for generation, _ in found]
        means = [float(group.mean or 0.0) for _, group in found]  # (none is None here)
        low = [group.ci_low if group.ci_low is not None else mean
               for (_, group), mean in zip(found, means, strict=True)]
        high = [group.ci_high if group.ci_high is not None else mean
                for (_, group), mean in zip(found, means, strict=True)]
        axes.fill_between(xs, low, high, color=colour, alpha=0.2, linewidth=0,
                          gid=f"ci-band-{j}")
        axes.plot(xs, means, color=colour, linewidth=1.8, marker="o", markersize=2.5,
                  gid=f"mean-{j}", label=_label(name))
        shown = None
        for generation, group in found:
            if group.n != shown:
                axes.annotate(f"n={group.n}", (generation, group.mean), fontsize=7,
                              color=colour, textcoords="offset points",
                              xytext=(3, 4 + 9 * (j % 4)))  # groups at one point: apart
                shown = group.n
    level = f"{points[0].confidence:.0%}" if points else "95%"
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("generation")
    axes.set_ylabel(_label(metric))
    axes.set_title(_label(f"{metric}: mean per group with its {level} CI"), fontsize=10)
    if names:
        axes.legend(fontsize=8, frameon=False)
    if points:
        note = (f"survivor rule: {points[0].rule}. CI: {points[0].ci_method}, "
                f"{points[0].resamples} resamples, seed {points[0].seed}.")
        figure.text(0.01, 0.0, _label("\n".join(textwrap.wrap(note, 130))), fontsize=5.5,
                    va="bottom", ha="left")
        figure.get_layout_engine().set(rect=(0, 0.08, 1, 0.92))  # type: ignore[union-attr,call-arg]
    buffer = io.BytesIO()
    with rc_context({"svg.hashsalt": "ouro-compare"}):  # the SVG's ids: the same each time
        figure.savefig(buffer, format=fmt, metadata=_METADATA[fmt], dpi=200)
    return buffer.getvalue()
