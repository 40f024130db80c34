"""`ouro log`: the per-generation table as a terminal table, and as its JSON document.

Rule: no decisions here. The rows come from ``reconciler.state.table`` (the table
``ouro export`` writes); this module chooses how each column reads on a terminal and
which columns fit. ``--columns`` names any column of the table (``ouro export``'s
names) or ``diff`` (``+added/-deleted`` and the paths changed); ``outcome`` reads as
the status with its cause, exit status and model failure. Without ``--columns`` the
table is ``generation`` (and ``epoch``, for a selected set's member) and ``outcome``,
then each other column of ``DEFAULT_COLUMNS`` and each probe column that keeps it within
``WIDTH`` characters; what did not fit is named under the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reconciler.envelope import envelope
from reconciler.errors import OuroError
from reconciler.plan.probes import UntilStop
from reconciler.report.escape import json_text, terminal
from reconciler.report.not_selected import stopped_text
from reconciler.report.sets import ORPHANED, headings, indent, member_json
from reconciler.report.words import plural
from reconciler.state.summaries import GenerationRow
from reconciler.state.table import EPOCH_COLUMN, GenerationTable, LineageTable, TableRow

__all__ = ["DEFAULT_COLUMNS", "NONE", "WIDTH", "check_columns", "diffstat", "log_json",
           "log_text", "outcome_of", "size", "until_json"]

NONE = "\u2014"  # an em dash in a table cell: the generation recorded no such value
WIDTH = 120  # the default table's widest line, in characters
DEFAULT_COLUMNS = ("generation", "outcome", "organism_bytes", "diff", "model_calls",
                   "spend_usd", "cpu_seconds", "memory_peak_bytes", "wall_seconds")
Stops = Mapping[str, UntilStop | None]  # lineage -> the spec.until stop that holds


def size(value: int | None) -> str:
    """Bytes as B, KiB, MiB or GiB (one decimal); unknown as an em dash."""
    if value is None:
        return NONE
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if value >= 1 << shift:
            return f"{value / (1 << shift):.1f}{unit}"
    return f"{value}B"


def outcome_of(row: GenerationRow) -> str:
    """changed / no-change / died (cause), with a model failure noted; row 0's ``seed``."""
    if row.status == "seed":  # row 0: no life made it (reconciler.state.seed_row)
        return "seed"
    text = row.status or "?"
    if row.status == "died":
        cause = row.death_cause or "unknown cause"
        text += f" ({cause}" + (f", exit {row.exit_status}" if row.exit_status is not None
                                else "") + ")"
    if row.model_failure:
        text += f" [model: {row.model_failure}]"
    if not row.observed:
        text += " [no observation]"
    return text


def diffstat(row: GenerationRow) -> str:
    """``+added/-deleted`` lines of organism.el and ``Np`` paths changed."""
    if row.organism_added is None or row.organism_deleted is None:
        return NONE
    paths = f" {row.paths_changed}p" if row.paths_changed is not None else ""
    return f"+{row.organism_added}/-{row.organism_deleted}{paths}"


def _seconds(value: float | None) -> str:
    return NONE if value is None else f"{value:.2f}"


def _cell(value: Any) -> str:
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return str(value)


# column -> (heading, cell); any other column of the table: its own name, ``_cell``
_SHOWN: dict[str, tuple[str, Callable[[TableRow], str]]] = {
    "generation": ("gen", lambda row: str(row.generation)),
    "outcome": ("outcome", lambda row: outcome_of(row.facts)),
    "organism_bytes": ("organism", lambda row: size(row.facts.organism_bytes)),
    "diff": ("diff", lambda row: diffstat(row.facts)),
    "model_calls": ("calls", lambda row: _cell(row.facts.model_calls)),
    "tokens_in": ("tok in", lambda row: _cell(row.facts.tokens_in)),
    "tokens_out": ("tok out", lambda row: _cell(row.facts.tokens_out)),
    "spend_usd": ("spend $", lambda row: _cell(row.facts.spend_usd)),
    "cpu_seconds": ("cpu s", lambda row: _seconds(row.facts.cpu_seconds)),
    "memory_peak_bytes": ("peak mem", lambda row: size(row.facts.memory_peak_bytes)),
    "wall_seconds": ("wall s", lambda row: _seconds(row.facts.wall_seconds)),
    "started_at": ("started", lambda row: _cell(row.facts.started_at)),
}


def check_columns(table: GenerationTable, columns: Sequence[str]) -> None:
    """``--columns``' names: each a column of the table or ``diff``, else an error naming
    the choices."""
    known = set(table.columns) | set(_SHOWN)
    unknown = [column for column in columns if column not in known]
    if unknown:
        raise OuroError(
            f"ouro log: --columns: no column {', '.join(map(repr, unknown))}; the table has "
            f"{', '.join(sorted(known))} (docs/export.md lists them)")


def _lines(lineage: LineageTable, columns: Sequence[str], pad: str) -> list[str]:
    table = [tuple(_SHOWN[c][0] if c in _SHOWN else c for c in columns)]
    table += [tuple(_SHOWN[c][1](row) if c in _SHOWN else _cell(row.value(c))
                    for c in columns) for row in lineage.rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return [f"{pad}  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line))
            .rstrip() for line in table]


def _fitted(lineage: LineageTable, probes: Sequence[str],
            pad: str) -> tuple[list[str], list[str]]:
    """The default table's lines within WIDTH: ``generation`` and ``outcome``, then each
    other default column and each probe column, in order, that keeps the table within
    WIDTH; and the columns left out."""
    columns = list(DEFAULT_COLUMNS[:2])
    if lineage.member is not None and lineage.member.selection is not None:
        columns.insert(1, EPOCH_COLUMN)  # a selected set's member: the epoch of each row
    lines = _lines(lineage, columns, pad)
    left: list[str] = []
    for column in (*DEFAULT_COLUMNS[2:], *probes):
        wider = _lines(lineage, [*columns, column], pad)
        if max(map(len, wider)) <= WIDTH:
            columns.append(column)
            lines = wider
        else:
            left.append(column)
    return lines, left


def _heading(lineage: LineageTable, pad: str, stop: UntilStop | None) -> list[str]:
    summary = lineage.summary
    edits = sum(row.external_edits_before for row in summary.rows) + summary.trailing_edits
    out = [f"{pad}{lineage.name}: {plural(summary.generations, 'generation')}, "
           f"{summary.outcomes['died']} died, "
           f"{plural(summary.model_failures, 'model failure')}, "
           f"{plural(edits, 'external edit')}, ${summary.spend_usd} spent"]
    if lineage.descent.parent_lineage is not None:
        out.append(f"{pad}  forked from {lineage.descent.parent_lineage} at gen "
                   f"{lineage.descent.parent_generation}")
    member = lineage.member
    if member is not None and member.orphaned:
        out.append(f"{pad}  {ORPHANED.format(member.set_name)}")
    if member is not None and member.not_selected is not None:
        out.append(f"{pad}  {stopped_text(member.not_selected)}")
    if stop is not None:
        out.append(f"{pad}  done ({stop.code}): {stop.message}")
    return out


def log_text(table: GenerationTable, stops: Stops | None = None,
             columns: Sequence[str] | None = None) -> str:
    """Each lineage's line and table; a set's members under its heading and their cell's
    (``reconciler.report.sets``), an orphan marked so, a fork's parent named, a lineage
    ``spec.until`` stopped marked as ``ouro status`` marks it. ``columns``: the table's
    columns (None: the default, fitted to ``WIDTH``)."""
    out: list[str] = []
    places = [lineage.member for lineage in table.lineages]
    for i, lineage in enumerate(table.lineages):
        out += headings(places, i)
        pad = indent(places[i])
        out += _heading(lineage, pad, (stops or {}).get(lineage.name))
        probes = sorted(lineage.probes.values)
        if columns is None:
            lines, left = _fitted(lineage, probes, pad)
        else:
            lines, left = _lines(lineage, columns, pad), []
        out += lines
        if any(NONE in line for line in lines[1:]):
            out.append(f"{pad}  ({NONE}: not recorded: no usage reported, a death before "
                       "the diff, no observation)")
        if left:
            out.append(f"{pad}  (not shown, to fit {WIDTH} characters: {', '.join(left)}; "
                       "--columns chooses)")
        for problem in lineage.summary.problems:
            out.append(f"{pad}  problem: {problem}")
    return terminal("\n".join(out) + "\n")


def until_json(stop: UntilStop | None) -> dict[str, Any] | None:
    """A ``spec.until`` stop in JSON (``ouro status``'s ``"until"``): code, generation, why."""
    return None if stop is None else {"code": stop.code, "generation": stop.generation,
                                      "message": stop.message}


def log_json(table: GenerationTable, stops: Stops | None = None) -> str:
    """The ``ouro-log`` document: each lineage's totals, place, descent and rows (the
    export's rows: every column of the table)."""
    columns = table.columns
    document = envelope(
        "ouro-log",
        lineages=[
            {
                "name": lineage.name,
                "generations": lineage.summary.generations,
                "outcomes": lineage.summary.outcomes,
                "death_kinds": lineage.summary.death_kinds,
                "spend_usd": str(lineage.summary.spend_usd),
                "heads": {"lineage": lineage.summary.lineage_head,
                          "observation": lineage.summary.observation_head},
                "problems": list(lineage.summary.problems),
                # its LineageSet (null: a plain lineage); orphaned: the set no longer has it
                "set": member_json(lineage.member),
                # a fork's parent and generation (null: not a fork)
                "parent": (None if lineage.descent.parent_lineage is None else
                           {"lineage": lineage.descent.parent_lineage,
                            "generation": lineage.descent.parent_generation}),
                # the spec.until stop that holds (null: none, or no --specs), as in status
                "until": until_json((stops or {}).get(lineage.name)),
                "rows": [row.as_dict(columns) for row in lineage.rows],
            }
            for lineage in table.lineages
        ],
    )
    return json_text(json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n")
