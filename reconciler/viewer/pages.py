"""What each page shows, as plain data for the templates (which escape all of it).

No decisions and no I/O: rows and details come from ``reconciler.state``.
Links are built here only from lineage names (quoted) and numbers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from reconciler.plan.probes import UntilStop
from reconciler.report.calls import call_stops, failure_of, reservation
from reconciler.report.history import outcome_of
from reconciler.report.stops import Stopped
from reconciler.report.words import plural
from reconciler.state.conditions import ControllerStatus, LineageConditions
from reconciler.state.history import DiffLimits, FileDiff, GenerationDetail
from reconciler.state.probes import ProbeTable
from reconciler.state.ran_with import MALFORMED, NOT_RECORDED, BornUnder, differs, kernel_run
from reconciler.state.summaries import GenerationRow, LineageSummary
from reconciler.viewer.family import ForkOf
from reconciler.viewer.plots import FLEET_PLOTS, PLOTS
from reconciler.viewer.reproduction import ReproductionView

__all__ = [
    "Bounded",
    "FleetLine",
    "controller_context",
    "diff_context",
    "diff_lines",
    "fleet_line",
    "fleet_plots",
    "fleet_probe_context",
    "generation_context",
    "lineage_context",
    "lineage_href",
    "stalled_text",
]

TEXT_CHARS = 4000  # a prompt or reply shown without ?full=1
BODY_CHARS = 200_000
# Every page is bounded, whatever a generation holds (1,000 files of 100 KB made a
# 136 MB page): what does not fit is cut with a note and a link to a raw view, itself
# bounded at RAW_CHARS.
VIEW_LIMITS = DiffLimits(files=200, patch_chars=50_000, total_chars=1_000_000,
                         body_chars=BODY_CHARS)
FULL_CALL_CHARS = 2_000_000  # ?full=1: all prompts and replies together, at most
STDERR_CHARS = 20_000
JOURNAL_CHARS = 20_000
RAW_CHARS = 4_000_000
# A lineage page plots at most PROBE_PLOTS probe metrics and lists at most
# PROBE_FAILURES probe failures; the fleet page's chooser offers at most PROBE_CHOICES
# (a forged probe branch may hold any number of them): the rest is counted, not shown.
PROBE_PLOTS = 48
PROBE_FAILURES = 50
PROBE_CHOICES = 500


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
    paths = f", {plural(row.paths_changed, 'path')}" if row.paths_changed is not None else ""
    return f"+{row.organism_added}/-{row.organism_deleted}{paths}"


def short(value: str | None) -> str:
    """A commit or fingerprint shortened for a table (the whole value goes in a title)."""
    if value is None:
        return "—"
    return value[:12] if len(value) > 12 else value


def kernel_cell(row: GenerationRow, born: BornUnder | None) -> tuple[str, str]:
    """A timeline row's kernel (text, CSS class): its short commit, or why there is none."""
    if row.ran_with is None:
        return "—", ""
    if row.ran_with == NOT_RECORDED:
        return "not recorded", "unrecorded"
    how = differs(born, row.kernel_commit, row.kernel_fingerprint)
    text = short(row.kernel_commit)
    if how is not None:
        return f"{text} (differs: {how})", "foreign"
    return (f"{text} (malformed)", "malformed") if row.ran_with == MALFORMED else (text, "")


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
    stop: Stopped | None = None
    foreign: int = 0  # generations whose recorded kernel differs from the born-under one
    running: str | None = None  # which apply runs it now, at which generation
    created: bool = True  # False: the spec names it, apply has not created it yet
    stalled: str | None = None  # `ouro controller`'s Stalled condition, when it is True
    until: UntilStop | None = None  # its spec.until holds: apply runs no more
    suspended: bool = False  # its spec's suspend: apply starts no generation

    @property
    def done(self) -> bool:
        """Done by its target (spec.until): done, however far short of ``desired``."""
        return self.until is not None


def _foreign(summary: LineageSummary, born: BornUnder | None) -> list[tuple[GenerationRow, str]]:
    found = []
    for row in summary.rows:
        how = differs(born, row.kernel_commit, row.kernel_fingerprint)
        if how is not None:
            found.append((row, how))
    return found


def created(summary: LineageSummary) -> bool:
    """Whether the lineage exists (a head commit, or generations); else not created yet."""
    return summary.lineage_head is not None or bool(summary.rows)


def fleet_line(name: str, summary: LineageSummary, desired: int | None,
               stop: Stopped | None = None, born: BornUnder | None = None,
               running: str | None = None, stalled: str | None = None, *,
               until: UntilStop | None = None, suspended: bool = False) -> FleetLine:
    last = outcome_of(summary.rows[-1]) if summary.rows else "—"
    return FleetLine(name, lineage_href(name), summary, desired, last, stop,
                     len(_foreign(summary, born)), running, created(summary), stalled,
                     until, suspended)


def stalled_text(found: LineageConditions | None) -> str | None:
    """``reason: message`` of a lineage's Stalled condition when it is True, else None."""
    condition = found.get("Stalled") if found is not None else None
    if condition is None or condition.status != "True":
        return None
    return f"{condition.reason}: {condition.message} (since {condition.last_transition})"


def controller_context(found: ControllerStatus | None) -> dict[str, Any] | None:
    """The fleet page's controller banner: its revision, running or not, a bad commit."""
    if found is None:
        return None
    own = found.controller
    bad = own.get("bad_commit")
    error = own.get("last_error")
    return {"revision": short(found.revision) if found.revision else "none yet",
            "repo": own.get("repo"), "branch": own.get("branch"),
            "running": own.get("running") is True, "updated": own.get("updated_at"),
            "bad_commit": (f"{short(bad.get('commit'))}: {bad.get('message')}"
                           if isinstance(bad, dict) else None),
            "error": error.get("message") if isinstance(error, dict) else None}


def probe_plot_src(column: str, name: str | None = None) -> str:
    """A probe metric's plot: of one lineage, or (no ``name``) across the fleet. The
    metric is a query parameter: a forged one may hold '/', which no path segment can."""
    query = f"?metric={quote(column, safe='')}"
    if name is None:
        return f"/fleet-probe-plot.svg{query}"
    return f"/probe-plot/{quote(name, safe='')}.svg{query}"


def fleet_probe_context(columns: Sequence[str], chosen: str | None) -> dict[str, Any]:
    """The fleet page's probe chooser: the metrics any lineage measured (``columns``,
    sorted) and the one overlaid (``?metric=``, else the first)."""
    offered = list(columns[:PROBE_CHOICES])
    if chosen not in columns:
        chosen = offered[0] if offered else None
    return {"probe_columns": offered, "probe_columns_more": len(columns) - len(offered),
            "probe_chosen": chosen,
            "probe_plot": probe_plot_src(chosen) if chosen is not None else None}


def _probe_context(name: str, probes: ProbeTable) -> dict[str, Any]:
    columns = probes.plottable()
    failures = sorted((number, probe, reason, probes.stderr_tails.get(probe, {}).get(number))
                      for probe, found in probes.failures.items()
                      for number, reason in found.items())
    return {
        "probe_plots": [{"src": probe_plot_src(column, name), "title": column}
                        for column in columns[:PROBE_PLOTS]],
        "probe_plots_more": max(0, len(columns) - PROBE_PLOTS),
        "probe_failures": failures[:PROBE_FAILURES],
        "probe_failures_more": max(0, len(failures) - PROBE_FAILURES),
    }


SPEND_PLOTS = frozenset({"spend", "cumulative-spend"})  # left out while nothing is spent


def fleet_plots(spent: bool = True) -> list[dict[str, str]]:
    """The fleet page's plots: each lineage one line (no spend plot while nothing was
    spent: a free model's fleet would lead with a flat zero)."""
    return [{"src": f"/fleet-plot/{name}.svg", "title": f"{PLOTS[name].title}, by lineage"}
            for name in FLEET_PLOTS if spent or name not in SPEND_PLOTS]


def lineage_context(name: str, summary: LineageSummary, born: BornUnder | None = None,
                    stop: Stopped | None = None, *, desired: int | None = None,
                    running: str | None = None, probes: ProbeTable | None = None,
                    until: UntilStop | None = None, fork: ForkOf | None = None,
                    suspended: bool = False, offset: int = 0,
                    reproduction: ReproductionView | None = None) -> dict[str, Any]:
    """The lineage page: its plots (no spend plot while nothing was spent), its
    totals, stops, probes and timeline, its parent when it is a fork, its last
    reproduction's verdict (``viewer.reproduction``)."""
    base = lineage_href(name)
    exists = created(summary)
    spent = bool(summary.spend_usd)  # the rows' decimal texts added (a "0.00" is none)
    plots = [{"src": f"/plot/{quote(name, safe='')}/{plot.name}.svg", "title": plot.title}
             for plot in PLOTS.values()
             if spent or plot.name not in SPEND_PLOTS] if exists else []
    edits = sum(row.external_edits_before for row in summary.rows) + summary.trailing_edits
    return {
        "name": name, "summary": summary, "plots": plots, "edits": edits,
        "desired": desired, "running": running, "created": exists,
        "diff_href": f"{base}/diff",
        "deaths": [row for row in summary.rows if row.status == "died"],
        "gen_href": lambda generation: f"{base}/gen/{int(generation)}",
        "born": born, "stop": stop, "foreign": _foreign(summary, born),
        "unrecorded": sum(1 for row in summary.rows if row.ran_with == NOT_RECORDED),
        "malformed": [row for row in summary.rows if row.ran_with == MALFORMED],
        "truncated": [row for row in summary.rows if row.truncated_calls],
        "stopping": [row for row in summary.rows if row.stops_lineage],
        "kernel_cell": lambda row: kernel_cell(row, born),
        "until": until, "fork": fork, "offset": offset, "suspended": suspended, "spent": spent,
        "reproduction": reproduction,
        **_probe_context(name, probes if probes is not None and exists
                         else ProbeTable({}, {})),
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
            "binary": item.binary, "lines": diff_lines(item.patch),
            "cut": item.patch.startswith("... (not shown") or "\n... (cut at " in item.patch}


def _calls(record: dict[str, Any], limit: int, total: int) -> list[dict[str, Any]]:
    """Each call with its prompt and reply cut at ``limit``, all of them at ``total``."""
    raw = record.get("model_calls")
    dicts = [call for call in raw if isinstance(call, dict)] if isinstance(raw, list) else []
    found = []
    for call, stop in zip(dicts, call_stops(record), strict=True):
        prompt = _bounded(call.get("prompt"), min(limit, total))
        total -= len(prompt.text)
        reply = _bounded(call.get("response"), min(limit, max(0, total)))
        total = max(0, total - len(reply.text))
        found.append({
            "index": call.get("request_index", "?"), "http_status": call.get("http_status"),
            "error": call.get("error"), "reserved": reservation(call),
            "accounted": call.get("accounted_usd"), "stop": stop,
            "prompt": prompt, "reply": reply,
        })
    return found


def _kernel(detail: GenerationDetail, born: BornUnder | None) -> dict[str, Any]:
    run = kernel_run(detail.record)
    return {"kernel": run, "born": born, "observed": detail.record is not None,
            "kernel_differs": differs(born, run.commit, run.fingerprint)}


def stderr_text(record: dict[str, Any] | None) -> str | None:
    """The observation's stderr tail as one text (None: none recorded)."""
    tail = (record or {}).get("stderr_tail")
    if isinstance(tail, list):
        tail = "\n".join(str(line) for line in tail)
    return tail if isinstance(tail, str) else None


def generation_context(name: str, summary: LineageSummary, detail: GenerationDetail, *,
                       full: bool = False, born: BornUnder | None = None) -> dict[str, Any]:
    row = detail.row
    record = detail.record or {}
    calls = (_calls(record, FULL_CALL_CHARS, FULL_CALL_CHARS) if full
             else _calls(record, TEXT_CHARS, 1 << 62))
    tail = stderr_text(record)
    constraints = record.get("constraints")
    number_ = row.generation
    return {
        "name": name, "row": row, "detail": detail,
        "lineage_href": lineage_href(name),
        "previous_href": generation_href(name, number_ - 1) if number_ > 1 else None,
        "next_href": (generation_href(name, number_ + 1)
                      if number_ < summary.generations else None),
        "full_href": generation_href(name, number_) + "?full=1",
        "stderr": _bounded(tail, STDERR_CHARS) if tail is not None else None,
        "journal": _bounded(detail.journal_entry, JOURNAL_CHARS)
        if detail.journal_entry is not None else None,
        "body": _bounded(detail.body, BODY_CHARS),
        "body_bytes": detail.body_chars,  # set when the body was read cut (DiffLimits)
        "files": [_file(item) for item in detail.diff],
        "files_more": max(0, detail.files_total - len(detail.diff)),
        "raw_href": lambda what: f"{generation_href(name, number_)}/raw/{what}",
        "calls": calls,
        "failure": failure_of(detail.record),
        "usage_exceeds_request": record.get("usage_exceeds_request") is True,
        **_kernel(detail, born),
        "ceilings": (json.dumps(constraints, indent=2, ensure_ascii=False)
                     if constraints else None),
    }


def diff_context(name: str, summary: LineageSummary, first: int, second: int,
                 files: Sequence[FileDiff]) -> dict[str, Any]:
    """Two generations' trees compared (A -> B; 0 is the seed)."""
    return {
        "name": name, "first": first, "second": second, "summary": summary,
        "lineage_href": lineage_href(name), "diff_href": f"{lineage_href(name)}/diff",
        "gen_href": lambda generation: generation_href(name, generation),
        "files": [_file(item) for item in files],
        # the page lists at most VIEW_LIMITS.files files: `ouro diff` shows them all
        "files_capped": len(files) >= VIEW_LIMITS.files,
    }
