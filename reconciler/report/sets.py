"""A LineageSet's members as status, log and export show them: headings, place, columns.

Rule: no decisions here. Who is a member, in which cell, and who is orphaned was
decided by ``reconciler.engine.sets`` (the lineages come grouped, each set's members
together cell by cell); this module only says it, the same way for every command.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from reconciler.report.epoch_fitness import epoch_fitness
from reconciler.report.not_selected import not_selected_json
from reconciler.report.words import plural
from reconciler.spec.sets import Membership

if TYPE_CHECKING:
    from reconciler.engine.set_epochs import SetEpochs

__all__ = ["ORPHANED", "SET_COLUMNS", "epoch_lines", "epochs_json", "headings", "indent",
           "matrix_columns", "matrix_value", "member_json", "set_values"]

SHOWN_LIVING = 8  # the living members status names; more are counted

ORPHANED = "orphaned: no longer in set {}; kept (nothing is deleted)"
SET_COLUMNS = ("set", "cell", "replica", "orphaned")  # export's, then matrix.<key>


def _place(member: Membership | None) -> tuple[str | None, str | None]:
    return (member.set_name, member.cell) if member is not None else (None, None)


def indent(member: Membership | None) -> str:
    """A lineage's block is indented under its set's heading, and under its cell's."""
    if member is None:
        return ""
    return "    " if member.cell is not None else "  "


def headings(members: Sequence[Membership | None], i: int) -> list[str]:
    """The headings shown before lineage ``i`` (``members``: each lineage's place, in the
    order shown): its set's when the set begins, its cell's when the cell begins, and
    ``lineages not in a set:`` when plain lineages follow a set (as plan shows them)."""
    before = _place(members[i - 1]) if i else (None, None)
    set_name, cell = here = _place(members[i])
    if here == before:
        return []
    if set_name is None:
        return ["lineages not in a set:"] if before[0] is not None else []
    out = []
    if before[0] != set_name:
        mine = [m for m in members if m is not None and m.set_name == set_name]
        live = [m for m in mine if not m.orphaned]
        cells = {m.cell for m in live if m.cell is not None}
        orphans = len(mine) - len(live)
        out.append(f"set {set_name}: {plural(len(live), 'member')}"
                   + (f" in {plural(len(cells), 'cell')}" if cells else "")
                   + (f", {orphans} orphaned" if orphans else ""))
    if cell is not None:
        values = next((m.matrix for m in members
                       if m is not None and _place(m) == here and m.matrix), {})
        shown = (", ".join(f"{key}={matrix_value(value)}" for key, value in values.items())
                 if values else "no longer in the set")
        out.append(f"  cell {cell} ({shown}):")
    return out


def matrix_value(value: Any) -> str:
    """A matrix value as one line: a scalar as itself, anything else as compact JSON."""
    if isinstance(value, str | int | float | bool) or value is None:
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)


def member_json(member: Membership | None) -> dict[str, Any] | None:
    """A lineage's place in its set as JSON (status, log): null outside a set."""
    if member is None:
        return None
    found = {"name": member.set_name, "cell": member.cell, "replica": member.replica,
             "matrix": dict(member.matrix), "orphaned": member.orphaned}
    if member.selection is not None:  # a selected set's member: its epoch, its stop
        found.update(born_epoch=member.born_epoch,
                     not_selected=not_selected_json(member.not_selected))
    return found


def matrix_columns(members: Sequence[Membership | None]) -> list[str]:
    """Export's matrix columns: ``matrix.<key>`` for every key of these members' sets, in
    the order the sets write them."""
    keys: dict[str, None] = {}
    for member in members:
        if member is not None:
            keys.update(dict.fromkeys(member.matrix))
    return [f"matrix.{key}" for key in keys]


def set_values(member: Membership | None, columns: Sequence[str]) -> dict[str, Any]:
    """Export's set columns of one lineage: ``set``, ``cell``, ``replica``, ``orphaned``
    and its ``matrix.<key>`` values (None: not in a set, or a value the set lost)."""
    if member is None:
        return {"set": None, "cell": None, "replica": None, "orphaned": None,
                **dict.fromkeys(columns)}
    return {"set": member.set_name, "cell": member.cell, "replica": member.replica,
            "orphaned": member.orphaned,
            **{column: member.matrix.get(column.removeprefix("matrix."))
               for column in columns}}


def _g(value: float | None) -> str:
    return "\u2014" if value is None else f"{value:g}"


def epochs_json(found: SetEpochs) -> dict[str, Any]:
    """A selected set's epochs in ``ouro status --json``: the set, its current epoch and
    living members, and per epoch its fitness (``reconciler.report.epoch_fitness``)."""
    return {**found.as_json(), "fitness": [one.as_json() for one in
                                           epoch_fitness(found.values, found.rule.lowest)]}


def epoch_lines(found: SetEpochs) -> list[str]:
    """A selected set's epochs as ``ouro status`` shows them under the set's heading: the
    current epoch of N, the living members, and per epoch the count, best and mean of
    ``by`` with the mean's 95% CI."""
    rule = found.rule
    names = ", ".join(found.living[:SHOWN_LIVING]) + (
        f", \u2026 ({len(found.living) - SHOWN_LIVING} more)"
        if len(found.living) > SHOWN_LIVING else "")
    out = [f"  selection: epoch {found.epoch} of {rule.epochs} ({rule.method} by {rule.by}, "
           f"{'lowest' if rule.lowest else 'highest'} first); "
           f"{plural(len(found.living), 'living member')}: {names or 'none'}",
           f"    {'epoch':>5}  {'measured':>8}  {'best':>12}  {'mean':>12}  95% CI of the mean"]
    out += [f"    {one.epoch:>5}  {one.measured:>8}  {_g(one.best):>12}  {_g(one.mean):>12}  "
            + ("\u2014" if one.ci_low is None or one.ci_high is None
               else f"[{one.ci_low:g}, {one.ci_high:g}]")
            for one in epoch_fitness(found.values, rule.lowest)]
    return out
