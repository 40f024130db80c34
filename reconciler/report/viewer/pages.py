"""What each page shows, as plain data for the templates (which escape all of it).

No decisions and no I/O: rows and details come from ``reconciler.state``.
Links are built here only from lineage names (quoted) and numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from reconciler.report.history import outcome_of
from reconciler.report.viewer.plots import PLOTS
from reconciler.state.history import FileDiff, GenerationDetail
from reconciler.state.summaries import GenerationRow, LineageSummary

__all__ = ["Bounded", "FleetLine", "diff_lines", "fleet_line", "generation_context",
           "lineage_context", "lineage_href"]

TEXT_CHARS = 4000  # a prompt or reply shown without ?full=1
BODY_CHARS = 200_000


def size(value: int | None) -> str:
    if value is None:
        return "—"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if value >= 1 << shift:
            return f"{value / (1 << shift):.1f} {unit}"
    return f"{value} B"


def number(value: Any, fmt: str = "%s") -> str:
    return "—" if value is None else fmt % (value,)


def diffstat(row: GenerationRow) -> str:
    if row.organism_added is None or row.organism_deleted is None:
        return "—"
    paths = f", {row.paths_changed} paths" if row.paths_changed is not None else ""
    return f"+{row.organism_added}/-{row.organism_deleted}{paths}"


def lineage_href(name: str) -> str:
    return "/lineage/" + quote(name, safe="")


def generation_href(name: str, generation: int) -> str:
    return f"{lineage_href(name)}/gen/{int(generation)}"


@dataclass(frozen=True)
class FleetLine:
    name: str
    href: str
    summary: LineageSummary
    desired: int | None
    last: str


def fleet_line(name: str, summary: LineageSummary, desired: int | None) -> FleetLine:
    last = outcome_of(summary.rows[-1]) if summary.rows else "—"
    return FleetLine(name, lineage_href(name), summary, desired, last)


def lineage_context(name: str, summary: LineageSummary) -> dict[str, Any]:
    base = lineage_href(name)
    plots = [{"src": f"/plot/{quote(name, safe='')}/{plot.name}.svg", "title": plot.title}
             for plot in PLOTS.values()]
    edits = sum(row.external_edits_before for row in summary.rows) + summary.trailing_edits
    return {
        "name": name, "summary": summary, "plots": plots, "edits": edits,
        "deaths": [row for row in summary.rows if row.status == "died"],
        "gen_href": lambda generation: f"{base}/gen/{int(generation)}",
    }


@dataclass(frozen=True)
class Bounded:
    text: str
    cut: int  # characters not shown


def _bounded(value: Any, limit: int) -> Bounded:
    if not isinstance(value, str):
        return Bounded("(none)", 0)
    if len(value) <= limit:
        return Bounded(value, 0)
    return Bounded(value[:limit], len(value) - limit)


def diff_lines(patch: str) -> list[tuple[str, str]]:
    """Each line of a unified diff with its kind (add, del, hunk, meta, ctx)."""
    lines = []
    for line in patch.rstrip("\n").split("\n") if patch else []:
        if line.startswith(("+++", "---", "diff ", "index ", "new file", "deleted file")):
            kind = "meta"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        elif line.startswith("@@"):
            kind = "hunk"
        else:
            kind = "ctx"
        lines.append((kind, line))
    return lines


def _file(item: FileDiff) -> dict[str, Any]:
    name = (item.new_path if item.old_path == item.new_path
            else f"{item.old_path} → {item.new_path}")
    return {"name": name, "status": item.status, "added": item.added, "deleted": item.deleted,
            "binary": item.binary, "lines": diff_lines(item.patch)}


def generation_context(name: str, summary: LineageSummary, detail: GenerationDetail, *,
                       full: bool = False) -> dict[str, Any]:
    row = detail.row
    record = detail.record or {}
    limit = 1 << 62 if full else TEXT_CHARS
    calls = []
    for call in record.get("model_calls") or []:
        if not isinstance(call, dict):
            continue
        calls.append({
            "index": call.get("request_index", "?"), "http_status": call.get("http_status"),
            "error": call.get("error"), "reserved": call.get("reserved_usd"),
            "accounted": call.get("accounted_usd"),
            "prompt": _bounded(call.get("prompt"), limit),
            "reply": _bounded(call.get("response"), limit),
        })
    tail = record.get("stderr_tail")
    if isinstance(tail, list):
        tail = "\n".join(str(line) for line in tail)
    constraints = record.get("constraints")
    number_ = row.generation
    return {
        "name": name, "row": row, "detail": detail,
        "lineage_href": lineage_href(name),
        "previous_href": generation_href(name, number_ - 1) if number_ > 1 else None,
        "next_href": (generation_href(name, number_ + 1)
                      if number_ < summary.generations else None),
        "full_href": generation_href(name, number_) + "?full=1",
        "stderr": tail if isinstance(tail, str) else None,
        "body": _bounded(detail.body, 1 << 62 if full else BODY_CHARS),
        "files": [_file(item) for item in detail.diff],
        "calls": calls,
        "ceilings": (json.dumps(constraints, indent=2, ensure_ascii=False)
                     if constraints else None),
    }
