"""What grew, as text, JSON, CSV and JSON lines: `ouro log`, `show`, `diff`, `export`.

No decisions here: rows come from ``reconciler.state.summaries``, details from
``reconciler.state.history``. Text that an organism or a model wrote may hold
terminal control sequences: every such text is shown with control characters
(other than newline and tab) escaped, so it cannot drive the terminal.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from reconciler.envelope import envelope
from reconciler.plan.probes import UntilStop
from reconciler.report.calls import call_stops, failure_of, reservation
from reconciler.report.escape import json_text, terminal
from reconciler.report.physics import kernel_json, kernel_lines
from reconciler.report.sets import (
    ORPHANED,
    SET_COLUMNS,
    headings,
    indent,
    matrix_columns,
    matrix_value,
    member_json,
    set_values,
)
from reconciler.report.words import plural
from reconciler.spec.sets import Membership
from reconciler.state.history import FileDiff, GenerationDetail
from reconciler.state.ran_with import BornUnder, kernel_run
from reconciler.state.summaries import COLUMNS, GenerationRow, LineageSummary

__all__ = [
    "EXPORT_FORMATS",
    "diff_text",
    "export_text",
    "log_json",
    "log_text",
    "outcome_of",
    "safe",
    "show_json",
    "show_text",
]

EXPORT_FORMATS = ("csv", "jsonl")
DEFAULT_TEXT_CHARS = 2000  # a prompt or reply shown by `ouro show` without --full


def safe(text: str) -> str:
    """Hostile text made inert for a terminal (``reconciler.report.escape.terminal``)."""
    return terminal(text)


NONE = "\u2014"  # an em dash in a table cell: the generation recorded no such value


def _size(value: int | None) -> str:
    if value is None:
        return NONE
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if value >= 1 << shift:
            return f"{value / (1 << shift):.1f}{unit}"
    return f"{value}B"


def _number(value: float | int | str | None, fmt: str = "{}") -> str:
    return NONE if value is None else fmt.format(value)


def outcome_of(row: GenerationRow) -> str:
    """changed / no-change / died (cause), with a model failure noted."""
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


def _diffstat(row: GenerationRow) -> str:
    if row.organism_added is None or row.organism_deleted is None:
        return NONE
    paths = f" {row.paths_changed}p" if row.paths_changed is not None else ""
    return f"+{row.organism_added}/-{row.organism_deleted}{paths}"


_HEADER = ("gen", "outcome", "organism", "diff", "calls", "tok in", "tok out", "spend $",
           "cpu s", "peak mem", "wall s", "started")


def _cells(row: GenerationRow) -> tuple[str, ...]:
    return (
        str(row.generation), outcome_of(row), _size(row.organism_bytes), _diffstat(row),
        _number(row.model_calls), _number(row.tokens_in), _number(row.tokens_out),
        _number(row.spend_usd), _number(row.cpu_seconds, "{:.2f}"),
        _size(row.memory_peak_bytes), _number(row.wall_seconds, "{:.2f}"),
        _number(row.started_at),
    )


ProbeColumns = Mapping[str, Mapping[int, Mapping[str, Any]]]  # lineage -> gen -> column -> value


def _probe_names(columns: Mapping[int, Mapping[str, Any]]) -> list[str]:
    return sorted({name for row in columns.values() for name in row})


def _probe_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


Members = Mapping[str, Membership | None]  # lineage -> its place in its set (None: none)
Stops = Mapping[str, UntilStop | None]  # lineage -> the spec.until stop that holds (None: none)


def until_json(stop: UntilStop | None) -> dict[str, Any] | None:
    """A ``spec.until`` stop in JSON (``ouro status``'s ``"until"``): code, generation, why."""
    return None if stop is None else {"code": stop.code, "generation": stop.generation,
                                      "message": stop.message}


def log_text(summaries: Sequence[tuple[LineageSummary, Sequence[GenerationRow]]],
             probes: ProbeColumns | None = None, members: Members | None = None,
             stops: Stops | None = None) -> str:
    """Each lineage's line and table; a set's members under its heading and their cell's
    (``reconciler.report.sets``), an orphan marked so, a lineage ``spec.until`` stopped
    marked as ``ouro status`` marks it."""
    out: list[str] = []
    places = [(members or {}).get(summary.name) for summary, _rows in summaries]
    for i, (summary, rows) in enumerate(summaries):
        out += headings(places, i)
        pad = indent(places[i])
        edits = sum(row.external_edits_before for row in summary.rows) + summary.trailing_edits
        out.append(
            f"{pad}{summary.name}: {plural(summary.generations, 'generation')}, "
            f"{summary.outcomes['died']} died, "
            f"{plural(summary.model_failures, 'model failure')}, "
            f"{plural(edits, 'external edit')}, ${summary.spend_usd} spent"
        )
        member = places[i]
        if member is not None and member.orphaned:
            out.append(f"{pad}  {ORPHANED.format(member.set_name)}")
        if (stop := (stops or {}).get(summary.name)) is not None:
            out.append(f"{pad}  done ({stop.code}): {stop.message}")
        extra = _probe_names(probes.get(summary.name, {}) if probes else {})
        values = probes.get(summary.name, {}) if probes else {}
        table = [(*_HEADER, *extra),
                 *((*_cells(row), *(_probe_cell(values.get(row.generation, {}).get(name))
                                    for name in extra)) for row in rows)]
        widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
        for line in table:
            out.append(f"{pad}  " + "  ".join(cell.ljust(widths[i])
                                              for i, cell in enumerate(line)).rstrip())
        if any(NONE in line for line in table[1:]):
            out.append(f"{pad}  ({NONE}: not recorded: no usage reported, a death before "
                       "the diff, no observation)")
        for problem in summary.problems:
            out.append(f"{pad}  problem: {problem}")
    return safe("\n".join(out) + "\n")


def log_json(summaries: Sequence[tuple[LineageSummary, Sequence[GenerationRow]]],
             probes: ProbeColumns | None = None, members: Members | None = None,
             stops: Stops | None = None) -> str:
    values = probes or {}
    places = members or {}
    document = envelope(
        "ouro-log",
        lineages=[
            {
                "name": summary.name,
                "generations": summary.generations,
                "outcomes": summary.outcomes,
                "death_kinds": summary.death_kinds,
                "spend_usd": str(summary.spend_usd),
                "heads": {"lineage": summary.lineage_head,
                          "observation": summary.observation_head},
                "problems": list(summary.problems),
                # its LineageSet (null: a plain lineage); orphaned: the set no longer has it
                "set": member_json(places.get(summary.name)),
                # the spec.until stop that holds (null: none, or no --specs), as in status
                "until": until_json((stops or {}).get(summary.name)),
                "rows": [{**asdict(row), **values.get(summary.name, {}).get(row.generation, {})}
                         for row in rows],
            }
            for summary, rows in summaries
        ],
    )
    return json_text(json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n")


def export_text(summaries: Sequence[LineageSummary], fmt: str,
                probes: ProbeColumns | None = None, members: Members | None = None,
                rows: Mapping[str, Sequence[GenerationRow]] | None = None) -> str:
    """One row per generation, ``lineage`` first, then ``COLUMNS``, then the probes'
    ``probe.<name>.<metric>`` columns, sorted, then, when a lineage is in a set, the set
    columns: ``set``, ``cell``, ``replica``, ``orphaned``, ``matrix.<key>`` (docs/export.md).
    ``rows``: a lineage's rows when not its summary's (its seed's row 0 first)."""
    found = probes or {}
    given = rows or {}
    places = members or {}
    keys = matrix_columns(list(places.values()))
    in_set = any(member is not None for member in places.values())

    def sets(summary: LineageSummary) -> dict[str, Any]:
        return set_values(places.get(summary.name), keys) if in_set else {}
    if fmt == "jsonl":
        return "".join(
            json_text(json.dumps({"lineage": summary.name, **asdict(row),
                                  **found.get(summary.name, {}).get(row.generation, {}),
                                  **sets(summary)},
                                 ensure_ascii=False, default=str)) + "\n"
            for summary in summaries for row in given.get(summary.name, summary.rows)
        )
    extra = sorted({name for columns in found.values() for name in _probe_names(columns)})
    tail = [*SET_COLUMNS, *keys] if in_set else []
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(("lineage", *COLUMNS, *extra, *tail))
    for summary in summaries:
        own = {key: _csv_value(value) for key, value in sets(summary).items()}
        for row in given.get(summary.name, summary.rows):
            values = {**asdict(row), **found.get(summary.name, {}).get(row.generation, {}),
                      **own}
            writer.writerow((summary.name, *("" if values.get(c) is None else values[c]
                                              for c in (*COLUMNS, *extra, *tail))))
    return buffer.getvalue()


def _csv_value(value: Any) -> Any:
    """A set column's value in CSV: a matrix value that is a mapping or a list as compact
    JSON (a scalar as itself)."""
    return matrix_value(value) if isinstance(value, dict | list) else value


def _bounded(text: str | None, full: bool, limit: int = DEFAULT_TEXT_CHARS) -> str:
    if text is None:
        return "(none)"
    if full or len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters; --full shows all)"


def diff_text(diffs: Sequence[FileDiff]) -> str:
    if not diffs:
        return "(no changes)\n"
    out = []
    for item in diffs:
        name = (item.new_path if item.old_path == item.new_path
                else f"{item.old_path} -> {item.new_path}")
        out.append(f"{item.status}: {name} (+{item.added}/-{item.deleted})")
        out.append("(binary)" if item.binary else item.patch.rstrip("\n"))
    return safe("\n".join(out) + "\n")


def _calls(record: dict[str, Any] | None) -> list[dict[str, Any]]:
    calls = record.get("model_calls") if record else None
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def _model_lines(record: dict[str, Any] | None) -> list[str]:
    failure = failure_of(record)
    out = [f"model failure: {failure.summary()}"] if failure is not None else []
    if record is not None and record.get("usage_exceeds_request") is True:
        out.append("usage exceeds the request: the provider reported more usage than the "
                   "request could have cost (recorded as reported)")
    return out


def _probe_lines(probes: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per probe record of the generation: its metrics or its failure."""
    lines = []
    for record in probes:
        metrics = record.get("metrics")
        shown = (", ".join(f"probe.{record.get('probe')}.{k} = {_probe_cell(v)}"
                           for k, v in sorted(metrics.items()))
                 if record.get("failure") is None and isinstance(metrics, dict)
                 else f"probe {record.get('probe')} failed: {record.get('failure')}")
        lines.append(f"{shown} (digest {str(record.get('digest'))[:12]})")
    return lines


def show_text(name: str, detail: GenerationDetail, *, full: bool = False,
              born: BornUnder | None = None,
              probes: Sequence[Mapping[str, Any]] = ()) -> str:
    row = detail.row
    record = detail.record
    out = [
        f"{name} gen {row.generation}: {outcome_of(row)}",
        f"commit {detail.commit} (previous {detail.parent or '—'})",
        f"started {row.started_at or '—'}; wall {_number(row.wall_seconds, '{:.2f}')} s; "
        f"cpu {_number(row.cpu_seconds, '{:.2f}')} s; peak memory {_size(row.memory_peak_bytes)}",
        f"organism {_size(row.organism_bytes)}, {_diffstat(row)}; "
        f"{plural(row.external_edits_before, 'external edit')} before it",
        f"model {row.provider or NONE}/{row.model or NONE}: "
        f"{plural(row.model_calls, 'call') if row.model_calls is not None else NONE + ' calls'}, "
        f"tokens {_number(row.tokens_in)} in / {_number(row.tokens_out)} out, "
        f"spend ${_number(row.spend_usd)}",
        *_model_lines(record),
        *_probe_lines(probes),
        "",
        *kernel_lines(kernel_run(record), born, record is not None),
        "",
        "## journal entry",
        detail.journal_entry or "(none)",
    ]
    if row.status == "died":
        tail = record.get("stderr_tail") if record else None
        if isinstance(tail, list):
            tail = "\n".join(str(line) for line in tail)
        out += ["", "## stderr (the observation's tail)",
                tail if isinstance(tail, str) and tail else "(none)",
                "", "## the body that died (organism.el as it ran)",
                _bounded(detail.body, full, limit=20 * DEFAULT_TEXT_CHARS)]
    out += ["", "## diff against the previous generation", diff_text(detail.diff).rstrip("\n")]
    for call, stop in zip(_calls(record), call_stops(record), strict=True):
        index = call.get("request_index", "?")
        out += ["", f"## model call {index}: http {call.get('http_status')}, "
                    f"error {call.get('error') or '—'}, "
                    f"reserved ${reservation(call)}, accounted ${call.get('accounted_usd')}",
                stop.summary()]
        if stop.error_detail:
            out.append(f"provider said: {stop.error_detail}")
        out += ["### prompt", _bounded(call.get("prompt"), full),
                "### reply", _bounded(call.get("response"), full)]
    if record is not None:
        constraints = record.get("constraints")
        out += ["", "## ceilings (as disclosed and enforced)",
                json.dumps(constraints, indent=2, ensure_ascii=False) if constraints else NONE]
    facts = out[:8] + [line for index, line in enumerate(out) if index and (
        line.startswith("## model call") or out[index - 1].startswith("## model call"))]
    if any(NONE in line for line in facts):  # (the journal's own dashes are not meant)
        out.insert(1, f"({NONE}: not recorded for this generation)")
    return safe("\n".join(out) + "\n")


def show_json(name: str, detail: GenerationDetail, *, full: bool = False,
              born: BornUnder | None = None,
              probes: Sequence[Mapping[str, Any]] = ()) -> str:
    calls = []
    for call in _calls(detail.record):
        item = dict(call)
        for key in ("prompt", "response"):
            if isinstance(item.get(key), str) and not full:
                item[key] = _bounded(item[key], False)
        calls.append(item)
    record = dict(detail.record) if detail.record else None
    if record is not None:
        record["model_calls"] = calls
    document = {
        **envelope("ouro-show"),
        "lineage": name,
        "row": asdict(detail.row),
        "commit": detail.commit,
        "previous": detail.parent,
        "journal_entry": detail.journal_entry,
        "body": detail.body if detail.row.status == "died" else None,
        "diff": [asdict(item) for item in detail.diff],
        "observation": record,
        "kernel": kernel_json(kernel_run(detail.record), born, detail.record is not None),
        "model_stops": [asdict(stop) for stop in call_stops(detail.record)],
        "provider_failure": (asdict(failure) if (failure := failure_of(detail.record))
                             else None),
        "probes": [dict(record) for record in probes],  # at each probe's current digest
    }
    return json_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
