"""One generation, and the diff between two: `ouro show`, `ouro diff`.

No decisions here: details come from ``reconciler.state.history`` (the table that
``ouro log`` and ``ouro export`` render is ``reconciler.report.log``'s and
``reconciler.report.table``'s). Text that an organism or a model wrote may hold
terminal control sequences: every such text is shown with control characters
(other than newline and tab) escaped, so it cannot drive the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from reconciler.envelope import envelope
from reconciler.report.calls import call_stops, failure_of, reservation
from reconciler.report.escape import json_text, terminal
from reconciler.report.log import NONE, outcome_of
from reconciler.report.log import diffstat as _diffstat
from reconciler.report.log import size as _size
from reconciler.report.physics import kernel_json, kernel_lines
from reconciler.report.words import plural
from reconciler.state.history import SHOW_LIMITS, FileDiff, GenerationDetail
from reconciler.state.probe_rules import STDERR_TAIL
from reconciler.state.ran_with import BornUnder, kernel_run

__all__ = [
    "diff_text",
    "outcome_of",
    "safe",
    "show_json",
    "show_text",
]

DEFAULT_TEXT_CHARS = 2000  # a prompt or reply shown by `ouro show` without --full


def safe(text: str) -> str:
    """Hostile text made inert for a terminal (``reconciler.report.escape.terminal``)."""
    return terminal(text)


def _number(value: float | int | str | None, fmt: str = "{}") -> str:
    return NONE if value is None else fmt.format(value)


def _probe_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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


SHOW_DIFF_LINES = 2_000  # lines of diff `ouro show` prints without --full


def _shown_diff(name: str, detail: GenerationDetail, full: bool) -> str:
    """The diff as read (``state.history.SHOW_LIMITS`` unless --full), at most
    ``SHOW_DIFF_LINES`` lines, then one line saying what was left out and how to get it."""
    lines = diff_text(detail.diff).rstrip("\n").split("\n")
    cut = detail.diff_cut or (len(lines) > SHOW_DIFF_LINES and not full)
    if not cut:
        return "\n".join(lines)
    number = detail.row.generation
    listed = len(detail.diff)
    return "\n".join([
        *lines[:SHOW_DIFF_LINES],
        f"... (diff cut: {min(len(lines), SHOW_DIFF_LINES)} of {len(lines)} lines shown, "
        f"{listed} of {detail.files_total} files listed, patches at most "
        f"{SHOW_LIMITS.total_chars // 1024} KiB in all; the whole diff: "
        f"`ouro diff {name} {number - 1} {number}` or `ouro show {name} {number} --full`)"])


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
    """One line per probe record of the generation: its metrics or its failure, a failure
    followed by the end of what the probe wrote to stderr (its record's ``stderr_tail``),
    indented."""
    lines = []
    for record in probes:
        found = record.get("metrics")
        metrics = found if isinstance(found, dict) and record.get("failure") is None else None
        failed = metrics is None
        shown = (f"probe {record.get('probe')} failed: {record.get('failure')}"
                 if metrics is None
                 else ", ".join(f"probe.{record.get('probe')}.{k} = {_probe_cell(v)}"
                                for k, v in sorted(metrics.items())))
        lines.append(f"{shown} (digest {str(record.get('digest'))[:12]})")
        tail = record.get("stderr_tail")
        if failed and isinstance(tail, str) and tail.strip():
            kept = tail[-STDERR_TAIL:].strip("\n")
            lines.append(f"  its stderr (the last {len(kept)} characters):")
            lines += [f"    {line}" for line in kept.split("\n")]
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
    out += ["", "## diff against the previous generation", _shown_diff(name, detail, full)]
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
        "diff_cut": detail.diff_cut,  # not all of it (no --full): `ouro diff` has the rest
        "diff_files": detail.files_total,
        "observation": record,
        "kernel": kernel_json(kernel_run(detail.record), born, detail.record is not None),
        "model_stops": [asdict(stop) for stop in call_stops(detail.record)],
        "provider_failure": (asdict(failure) if (failure := failure_of(detail.record))
                             else None),
        "probes": [dict(record) for record in probes],  # at each probe's current digest
    }
    return json_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
