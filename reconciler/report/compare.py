"""`ouro compare` and `ouro best`: a metric's readings grouped, summarized, shown.

Rule: no decisions about lineages here. The rows come from
``reconciler.engine.compare_rows`` (the columns of `ouro export`); the statistics from
``reconciler.report.statistics`` (one home for them, the viewer's set page calls it
too). This module says which group a lineage is in (its set cell, a plain lineage its
own, or a label's value with ``--by``), reads the metric as a number, and renders.
A set's orphans (members the set no longer has) are listed, never counted.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from reconciler.engine.compare_rows import LineageRows
from reconciler.engine.epochs import EPOCH_LABEL
from reconciler.envelope import envelope
from reconciler.errors import OuroError
from reconciler.report.escape import json_text, terminal
from reconciler.report.statistics import Comparison, GroupAt, MemberSeries, PairAt
from reconciler.state.summaries import COLUMNS

__all__ = ["Ranked", "best_json", "best_text", "compare_json", "compare_text", "group_of",
           "members_of", "metric_columns", "number", "ranked"]

NONE = "\u2014"


def group_of(item: LineageRows, by: str | None) -> str:
    """The lineage's group: ``<set>/<cell>`` (a set without a matrix: ``<set>``), a plain
    lineage's own name, or with ``by``: ``<label>=<value>`` (``<label> unset``). A selected
    set's own members have no ``ouro/epoch`` label (its born members have theirs): by
    ``ouro/epoch`` they are epoch 1's."""
    if by is not None:
        value = item.labels.get(by)
        if value is None and by == EPOCH_LABEL and item.member is not None \
                and item.member.selection is not None:
            value = str(item.member.born_epoch)
        return f"{by}={value}" if value is not None else f"{by} unset"
    if item.member is None:
        return item.name
    return (f"{item.member.set_name}/{item.member.cell}" if item.member.cell is not None
            else item.member.set_name)


def number(value: Any) -> float | None:
    """A column's value as a number: an int or float (not NaN), a boolean as 0 or 1, a
    decimal text (``spend_usd``) as its value; anything else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        found = float(value)
        return None if math.isnan(found) or math.isinf(found) else found
    if isinstance(value, str):
        try:
            parsed = Decimal(value)
        except InvalidOperation:
            return None
        return float(parsed) if parsed.is_finite() else None
    return None


def metric_columns(found: Sequence[LineageRows]) -> list[str]:
    """The columns a metric may name: `ouro export`'s (``COLUMNS``), then the probes'."""
    probes = sorted({name for item in found for row in item.rows.values() for name in row
                     if name.startswith("probe.")})
    return [*COLUMNS, *probes]


def check_metric(metric: str, found: Sequence[LineageRows], command: str,
                 flag: str = "--metric") -> None:
    """A metric no lineage has is an error naming the columns there are (the rows may
    hold only the metric asked for: a probe column none of them has is named as such)."""
    if metric in COLUMNS:
        return
    if not metric.startswith("probe."):
        raise OuroError(
            f"{command}: {flag} {metric!r} is no column of the per-generation table "
            "(`ouro export`): a probe's is probe.NAME.METRIC, else one of "
            + ", ".join(COLUMNS))
    probes = [name for name in metric_columns(found) if name.startswith("probe.")]
    if metric not in probes:
        raise OuroError(
            f"{command}: {flag} {metric!r}: no generation of these lineages has that "
            "measurement; check the probe's name and metric (`ouro export NAME` shows its "
            "probe.NAME.METRIC columns)"
            + (f"; these have: {', '.join(probes)}" if probes else ""))


def members_of(found: Sequence[LineageRows], metric: str,
               by: str | None) -> list[MemberSeries]:
    """Each lineage that is no orphan, in its group, with its numeric readings."""
    out = []
    for item in found:
        if item.member is not None and item.member.orphaned:
            continue
        values = {generation: value for generation, row in item.rows.items()
                  if (value := number(row.get(metric))) is not None}
        out.append(MemberSeries(item.name, group_of(item, by), item.last, values))
    return out


def _reading_json(group: GroupAt, members: Sequence[MemberSeries],
                  generation: int) -> list[dict[str, Any]]:
    counted = {found.member: found for found in group.readings}
    return [{"lineage": member.name,
             "alive": member.last is not None and member.last >= generation,
             "last_generation": member.last,
             "value": counted[member.name].value if member.name in counted else None,
             "read_at": counted[member.name].generation if member.name in counted else None}
            for member in members if member.group == group.group]


def _group_json(group: GroupAt, members: Sequence[MemberSeries],
                generation: int) -> dict[str, Any]:
    return {"group": group.group, "members": group.members, "alive": group.alive,
            "n": group.n, "carried": group.carried, "mean": group.mean,
            "median": group.median, "ci": [group.ci_low, group.ci_high],
            "min": group.minimum, "max": group.maximum,
            "readings": _reading_json(group, members, generation)}


def _pair_json(pair: PairAt) -> dict[str, Any]:
    return {"first": pair.first, "second": pair.second, "difference": pair.difference,
            "ci": [pair.ci_low, pair.ci_high], "statistic": pair.statistic,
            "p_value": pair.p_value}


def compare_json(comparison: Comparison, members: Sequence[MemberSeries], metric: str,
                 at: str, orphans: Sequence[str], plot: str | None = None) -> str:
    """The `ouro compare --json` document: every number, and the rules that made them."""
    document = envelope(
        "ouro-compare", metric=metric, at=at, generation=comparison.generation,
        carry_last=comparison.carry_last, survivor_rule=comparison.rule,
        confidence=comparison.confidence,
        ci_method=comparison.ci_method,
        bootstrap={"method": "BCa", "resamples": comparison.resamples,
                   "seed": comparison.seed},
        test=comparison.test,
        groups=[_group_json(group, members, comparison.generation)
                for group in comparison.groups],
        pairs=[_pair_json(pair) for pair in comparison.pairs],
        orphans_left_out=list(orphans), plot=plot)
    return json_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def _num(value: float | None) -> str:
    return NONE if value is None else f"{value:.6g}"


def _ci(low: float | None, high: float | None) -> str:
    return NONE if low is None or high is None else f"[{low:.6g}, {high:.6g}]"


def _table(lines: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip()
            for line in lines]


def compare_text(comparison: Comparison, metric: str, orphans: Sequence[str],
                 plot: str | None = None) -> str:
    """The comparison as a table of groups and one of pairs, with its rules stated."""
    level = f"{comparison.confidence:.0%}"
    out = [f"{metric} at generation {comparison.generation}"
           + (" (carried forward: --carry-last)" if comparison.carry_last else ""), ""]
    out += _table([("group", "members", "alive", "n", "mean", "median", f"{level} CI",
                    "min", "max"),
                   *((g.group, str(g.members), str(g.alive),
                      str(g.n) + (f" ({g.carried} carried)" if g.carried else ""),
                      _num(g.mean), _num(g.median), _ci(g.ci_low, g.ci_high),
                      _num(g.minimum), _num(g.maximum)) for g in comparison.groups)])
    if comparison.pairs:
        out += ["", "pairs (first - second):"]
        out += _table([("first", "second", "difference of means", f"{level} CI", "p"),
                       *((p.first, p.second, _num(p.difference), _ci(p.ci_low, p.ci_high),
                          _num(p.p_value)) for p in comparison.pairs)])
    out += ["", f"survivor rule: {comparison.rule}",
            f"CI: {comparison.ci_method}, {comparison.resamples} resamples, seed "
            f"{comparison.seed}",
            f"p: {comparison.test}"]
    if orphans:
        out.append(f"left out (orphans: no longer in their set): {', '.join(orphans)}")
    if plot is not None:
        out.append(f"figure: {plot}")
    return terminal("\n".join(out) + "\n")


@dataclass(frozen=True)
class Ranked:
    """One (lineage, generation) pair of `ouro best`, with its value and how to get it."""

    lineage: str
    generation: int
    value: float
    command: str


def ranked(found: Sequence[LineageRows], metric: str, count: int, lowest: bool,
           spec_of: dict[str, str]) -> list[Ranked]:
    """The ``count`` highest (``lowest``: lowest) numeric readings of ``metric`` over every
    (lineage, generation) pair, ties in the lineages' order then by generation; each
    with the `ouro cat` command that prints its organism (``spec_of``: the lineage's
    spec file, named with ``--specs``)."""
    pairs = [(value, index, generation, item.name)
             for index, item in enumerate(found)
             for generation, row in sorted(item.rows.items())
             if (value := number(row.get(metric))) is not None]
    pairs.sort(key=lambda p: (p[0] if lowest else -p[0], p[1], p[2]))
    out = []
    for value, _index, generation, name in pairs[:count]:
        command = ["ouro", "cat", name, str(generation)]
        if name in spec_of:
            command += ["--specs", spec_of[name]]
        out.append(Ranked(name, generation, value, shlex.join(command)))
    return out


def best_json(found: Sequence[Ranked], metric: str, lowest: bool) -> str:
    document = envelope("ouro-best", metric=metric, order="lowest" if lowest else "highest",
                        best=[{"rank": i, "lineage": item.lineage,
                               "generation": item.generation, "value": item.value,
                               "command": item.command}
                              for i, item in enumerate(found, start=1)])
    return json_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def best_text(found: Sequence[Ranked], metric: str, lowest: bool) -> str:
    if not found:
        return terminal(f"no generation has a numeric {metric}\n")
    lines = [("rank", "lineage", "gen", metric, "organism")]
    lines += [(str(i), item.lineage, str(item.generation), _num(item.value), item.command)
              for i, item in enumerate(found, start=1)]
    head = f"the {len(found)} {'lowest' if lowest else 'highest'} {metric}:"
    return terminal("\n".join([head, *_table(lines)]) + "\n")
