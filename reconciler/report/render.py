"""Plans and status as text (terraform-plan style), JSON (stable, versioned) and markdown.

No decisions here: everything shown was decided by ``reconciler.plan`` or read
by ``reconciler.state.observe``. Colour only on a terminal (rich decides; ``NO_COLOR``
is honoured). The JSON documents are versioned by ``format_version``: fields
may be added, never renamed or dropped, without bumping it.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

from reconciler.engine.fleet import StatusLine
from reconciler.envelope import FORMAT_VERSION, envelope
from reconciler.plan import ACTIONS, Change, LineagePlan, Plan
from reconciler.report.calls import finality
from reconciler.report.escape import json_text, markdown, markdown_code, rich_text, terminal
from reconciler.report.not_selected import NOT_SELECTED, not_selected_json, stopped_text
from reconciler.report.sets import (
    ORPHANED,
    epoch_lines,
    epochs_json,
    headings,
    indent,
    member_json,
)
from reconciler.report.words import plural
from reconciler.state.conditions import ControllerStatus, LineageConditions

if TYPE_CHECKING:
    from rich.console import Console

    from reconciler.engine.set_epochs import SetEpochs

__all__ = [
    "FORMAT_VERSION",
    "MARKERS",
    "StatusLine",
    "conditions_text",
    "controller_lines",
    "plan_document",
    "plan_json",
    "plan_markdown",
    "plan_text",
    "print_plan",
    "print_status",
    "status_document",
    "status_json",
    "summary_line",
]

MARKERS = {"create": "+", "extend": "~", "recover": "~", "in-sync": "=", "ahead": "=", "done": "=",
           "refuse": "!", "suspended": "-"}
_STYLES = {"create": "green", "extend": "yellow", "recover": "magenta", "in-sync": "dim",
           "ahead": "cyan", "refuse": "bold red", "done": "green", "suspended": "cyan"}
# Markdown shows refusals first: they are what a reviewer must act on.
_MARKDOWN_ORDER = ("refuse", "recover", "create", "extend", "ahead", "done", "suspended",
                   "in-sync")


def _money(value: Decimal) -> str:
    return f"${value:.2f}" if value == value.quantize(Decimal("0.01")) else f"${value}"


def summary_line(plan: Plan) -> str:
    counts = plan.counts
    parts = [
        f"{counts.get('create', 0)} to create",
        f"{counts.get('extend', 0)} to extend",
        f"{counts.get('recover', 0)} to recover",
        f"{counts.get('in-sync', 0)} in sync",
        f"{counts.get('ahead', 0)} ahead",
        f"{counts.get('refuse', 0)} refused",
    ]
    stopped = sum(1 for item in plan.lineages if item.not_selected is not None)
    if counts.get("done", 0) > stopped:
        parts.insert(5, f"{counts['done'] - stopped} done (spec.until)")
    if stopped:
        parts.insert(5, f"{stopped} stopped ({NOT_SELECTED})")
    if counts.get("suspended"):
        parts.insert(-1, f"{counts['suspended']} suspended")
    if plan.orphans:
        parts.append(f"{len(plan.orphans)} orphaned (kept)")
    return f"Plan: {', '.join(parts)}. Worst-case spend: {_money(plan.max_spend_usd)}"


def _numbers(item: LineagePlan) -> str:
    if item.action in ("create", "extend", "recover"):
        return (f"{item.observed_generations} -> "
                f"{plural(item.desired_generations, 'generation')} "
                f"(+{item.missing_generations}, up to {_money(item.max_spend_usd)})")
    if item.action == "refuse":
        return f"{plural(item.observed_generations, 'generation')} observed"
    return f"{item.observed_generations}/{plural(item.desired_generations, 'generation')}"


def _labels(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _change_text(change: Change) -> str:
    return f"{change.field}: {change.observed!r} -> {change.desired!r}"


# ---------------------------------------------------------------- text


def _shows_kernel(plan: Plan, item: LineagePlan) -> bool:
    """A kernel other than this ouro's own at its own commit is worth a line."""
    kernel = item.kernel
    return (kernel is not None and kernel.source is not None
            and (kernel.source != "running" or kernel.commit != plan.instrument.commit))


def plan_text(plan: Plan) -> list[tuple[str, str | None]]:
    """The human plan as (line, style) pairs; ``print_plan`` writes them."""
    lines: list[tuple[str, str | None]] = []
    width = max((len(item.name) for item in plan.lineages), default=0)
    current: str | None = None
    for item in plan.lineages:
        if item.set_name != current:
            if current is not None:
                lines.extend(_orphan_lines(plan, current, width))
            current = item.set_name
            lines.append((_set_heading(plan, current) if current is not None
                          else "lineages not in a set:", "bold"))
        marker = MARKERS[item.action]
        reason = item.reason or (NOT_SELECTED if item.not_selected is not None else None)
        action = item.action + (f" ({reason})" if reason else "")
        lines.append((f"  {marker} {item.name:<{width}}  {action:<12}  {_numbers(item)}",
                      _STYLES[item.action]))
        if item.labels:
            lines.append((f"      labels: {_labels(item.labels)}", "dim"))
        if item.refusals:
            for refusal in item.refusals:
                lines.append((f"      {refusal.reason}: {refusal.message}", None))
        elif item.action in ("refuse", "recover", "ahead", "done", "suspended"):
            lines.append((f"      {item.message}", None))
        if item.fork is not None and item.action == "create":
            lines.append((f"      from: gen {item.fork['generation']} of "
                          f"{item.fork['parent']} (commit {str(item.fork['commit'])[:12]}), "
                          f"{item.fork['kernel']} kernel", "cyan"))
        if _shows_kernel(plan, item):
            assert item.kernel is not None
            lines.append((f"      kernel: {item.kernel.message}", "cyan"))
        for change in item.changes:
            lines.append((f"      ~ {_change_text(change)}", "yellow"))
        for note in item.notes:
            lines.append((f"      note: {note}", "dim"))
        if item.measure.measurements:
            lines.append((f"      measure: {item.measure.measurements} (generation, probe) "
                          f"pair(s) of {item.measure.probes} probe(s), at most "
                          f"{item.measure.cpu_seconds} CPU seconds", "cyan"))
    if current is not None:
        lines.extend(_orphan_lines(plan, current, width))
    if lines:
        lines.append(("", None))
    lines.append((summary_line(plan), "bold"))
    return lines


def _set_heading(plan: Plan, set_name: str) -> str:
    members = sum(1 for item in plan.lineages if item.set_name == set_name)
    orphans = sum(1 for orphan in plan.orphans if orphan.set_name == set_name)
    return (f"set {set_name}: {plural(members, 'member')}"
            + (f", {orphans} orphaned" if orphans else ""))


def _orphan_lines(plan: Plan, set_name: str, width: int) -> list[tuple[str, str | None]]:
    return [(f"  ? {orphan.name:<{width}}  {'orphaned':<12}  no longer in the set; kept "
             f"(nothing is deleted): {orphan.path}", "dim")
            for orphan in plan.orphans if orphan.set_name == set_name]


def _console(stream: IO[str] | None) -> Console:
    # rich is imported only for human output: --json and --markdown start faster.
    from rich.console import Console

    return Console(file=stream, highlight=False, soft_wrap=True, emoji=False)


def _plain(stream: IO[str] | None) -> IO[str] | None:
    """The stream when rich would surely write to it as plain text (no terminal, nothing
    forcing one: rich's own rule, read without importing rich, which costs a small plan
    more than the plan); None when rich is to decide."""
    file = sys.stdout if stream is None else stream
    if (file is None or hasattr(file, "rich_proxied_file") or hasattr(builtins, "get_ipython")
            or "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ):
        return None
    try:
        return None if file.isatty() else file
    except (AttributeError, ValueError):
        return None


def print_plan(plan: Plan, stream: IO[str] | None = None) -> None:
    """The text plan: through rich on a terminal (colour); written as the same plain
    lines straight to any other stream (rich costs ~0.1 ms a line: a 1,000-member set's
    plan has 2,000 lines; importing it costs more than an in-sync plan of one lineage)."""
    lines = plan_text(plan)
    plain = _plain(stream)
    if plain is None:
        console = _console(stream)
        if console.color_system is not None or console.is_terminal:
            for line, style in lines:
                console.print(rich_text(line), style=style)
            return
        plain = console.file
    plain.write("".join(f"{terminal(line).expandtabs(8)}\n" for line, _ in lines))
    plain.flush()


# ---------------------------------------------------------------- JSON


def _lineage_document(item: LineagePlan) -> dict[str, Any]:
    return {
        "name": item.name,
        "action": item.action,
        "reason": item.reason,  # the first of "reasons" (kept for existing consumers)
        "message": item.message,
        "reasons": [{"reason": r.reason, "message": r.message} for r in item.refusals],
        "observed_generations": item.observed_generations,
        "desired_generations": item.desired_generations,
        "missing_generations": item.missing_generations,
        "max_spend_usd": str(item.max_spend_usd),
        "changes": [
            {"field": c.field, "observed": c.observed, "desired": c.desired}
            for c in item.changes
        ],
        "heads": dict(item.heads),
        "branches": dict(item.branches),  # the spec's, else those the lineage records
        "interrupted": item.interrupted,
        "notes": list(item.notes),
        "spec_sha256": item.spec_sha256,
        "labels": dict(sorted(item.labels.items())),
        "set": item.set_name,  # the LineageSet it is a member of (null: a plain lineage)
        "running": item.running,
        # which kernel runs it; null: this ouro's own (a lineage to create, no pin)
        "kernel": item.kernel.as_json() if item.kernel is not None else None,
        # probes' measurement work: (generation, probe) pairs without a record
        "measure": item.measure.as_json(),
        # a fork to be born: its parent, generation, commit and kernel (null otherwise)
        "fork": item.fork,
        # action "done": the spec.until condition that holds (code: target-reached | plateau)
        "until": None if item.until is None else {"code": item.until.code,
                                                   "generation": item.until.generation,
                                                   "message": item.until.message},
        # action "done": the selection decision that stopped this member (null: none)
        "not_selected": not_selected_json(item.not_selected),
    }


def plan_document(plan: Plan) -> dict[str, Any]:
    return {
        **envelope("ouro-plan"),
        "instrument": {"commit": plan.instrument.commit,
                       "fingerprint": plan.instrument.fingerprint},
        "summary": {
            # "suspended" (added later) is there when a lineage is: older documents stay
            **{action: plan.counts.get(action, 0) for action in ACTIONS
               if action != "suspended" or plan.counts.get(action)},
            "max_spend_usd": str(plan.max_spend_usd),
            "exit_code": plan.exit_code,
        },
        "lineages": [_lineage_document(item) for item in plan.lineages],
        # members their sets no longer have, kept on disk (nothing is ever deleted)
        "orphaned": [{"name": o.name, "set": o.set_name, "path": o.path}
                     for o in plan.orphans],
    }


def plan_json(plan: Plan) -> str:
    return json_text(json.dumps(plan_document(plan), indent=2, ensure_ascii=False,
                                default=str) + "\n")


# ---------------------------------------------------------------- markdown


def _cell(text: Any) -> str:
    return markdown(text)


def _reasons_cell(item: LineagePlan) -> str:
    reasons: list[str | None] = [r.reason for r in item.refusals] or [item.reason]
    return "<br>".join(markdown_code(reason) for reason in reasons)


def _messages_cell(item: LineagePlan) -> str:
    messages = [r.message for r in item.refusals] or [item.message]
    return "<br>".join(_cell(message) for message in messages)


def plan_markdown(plan: Plan) -> str:
    out = ["### ouro plan", "", f"**{summary_line(plan)}**", "",
           f"Instrument {markdown_code(plan.instrument.commit[:12])}.", ""]
    for action in _MARKDOWN_ORDER:
        items = [item for item in plan.lineages if item.action == action]
        if not items:
            continue
        out.append(f"#### {MARKERS[action]} {action} ({len(items)})")
        out.append("")
        if action == "refuse":
            out += ["| lineage | reason | observed | what to do |", "|---|---|---:|---|"]
            out += [f"| {_lineage_cell(i)} | {_reasons_cell(i)} | {i.observed_generations} | "
                    f"{_messages_cell(i)} |" for i in items]
        else:
            out += ["| lineage | observed | desired | missing | worst-case spend | changes |",
                    "|---|---:|---:|---:|---:|---|"]
            out += [
                f"| {_lineage_cell(i)} | {i.observed_generations} | {i.desired_generations} | "
                f"{i.missing_generations} | {_money(i.max_spend_usd)} | "
                f"{_cell('; '.join(_change_text(c) for c in i.changes)) or '—'} |"
                for i in items
            ]
        out.append("")
    if plan.orphans:
        out += [f"#### ? orphaned ({len(plan.orphans)}): kept, nothing is deleted", "",
                "| lineage | set | path |", "|---|---|---|"]
        out += [f"| {markdown_code(o.name)} | {markdown_code(o.set_name)} | "
                f"{markdown_code(o.path)} |" for o in plan.orphans]
        out.append("")
    return "\n".join(out)


def _lineage_cell(item: LineagePlan) -> str:
    if item.set_name is None:
        return markdown_code(item.name)
    return f"{markdown_code(item.name)} (set {markdown_code(item.set_name)})"


# ---------------------------------------------------------------- status


def status_document(lines: Sequence[StatusLine], controller: ControllerStatus | None = None,
                    epochs: Sequence[SetEpochs] = ()) -> dict[str, Any]:
    return {
        **envelope("ouro-status"),
        # each selected set's current epoch, living members and fitness per epoch
        "selection": [epochs_json(found) for found in epochs],
        # `ouro controller`'s own conditions (null: no controller wrote any here)
        "controller": controller.controller if controller is not None else None,
        "lineages": [
            {
                "name": line.name,
                "generations": line.report.generations,
                "observed_generations": line.report.observed_generations,
                "outcomes": dict(line.report.outcomes),
                "death_kinds": dict(line.report.death_kinds),
                "model_failures": line.report.model_failures,
                "last_model_failure": line.report.last_model_failure,
                "accounted_usd": line.report.accounted_usd,
                "last_journal_heading": line.report.last_journal_heading,
                "heads": {"lineage": line.report.lineage_head,
                          "observation": line.report.observation_head},
                "problems": list(line.report.problems),
                "generation_running": list(line.report.generation_running),
                "labels": dict(sorted(line.labels.items())),
                "places": line.places(),
                "running": line.running,
                "kernel": line.kernel.as_json() if line.kernel is not None else None,
                "until": None if line.until is None else {
                    "code": line.until.code, "generation": line.until.generation,
                    "message": line.until.message},
                # its LineageSet (null: a plain lineage); orphaned: the set no longer has it
                "set": member_json(line.member),
                "conditions": None if line.conditions is None else [
                    c.as_json() for c in line.conditions.conditions],
            }
            for line in lines
        ],
    }


def status_json(lines: Sequence[StatusLine], controller: ControllerStatus | None = None,
                epochs: Sequence[SetEpochs] = ()) -> str:
    return json_text(json.dumps(status_document(lines, controller, epochs), indent=2,
                                ensure_ascii=False, default=str) + "\n")


def controller_lines(controller: ControllerStatus) -> list[tuple[str, str | None]]:
    """The controller's block of `ouro status`: who, the revision, a bad commit, an error."""
    own = controller.controller

    def short(value: Any) -> str:
        return str(value)[:12] if value else "none yet"

    lines: list[tuple[str, str | None]] = [(
        f"controller: revision {short(own.get('revision'))} of {own.get('repo')} "
        f"{own.get('branch')} ({'running' if own.get('running') else 'not running'}: pid "
        f"{own.get('pid')} on {own.get('host')}, updated {own.get('updated_at')})", "bold")]
    bad = own.get("bad_commit")
    if isinstance(bad, dict):
        lines.append((f"  bad commit {short(bad.get('commit'))}, not applied: "
                      f"{bad.get('message')}", "red"))
    error = own.get("last_error")
    if isinstance(error, dict):
        lines.append((f"  last error ({error.get('at')}): {error.get('message')}", "red"))
    budget = own.get("budget")
    if isinstance(budget, dict):
        lines.append((f"  spend on {budget.get('day')}: ${budget.get('spent_usd')} of "
                      f"${budget.get('limit_usd')}" + (" (no generation starts)"
                                                     if budget.get("blocked") else ""),
                      "red" if budget.get("blocked") else None))
    return lines


def conditions_text(found: LineageConditions) -> str:
    """One line: each condition's status and reason, the true ones' messages."""
    parts = [f"{c.type}={c.status} ({c.reason})" for c in found.conditions]
    stalled = found.get("Stalled")
    text = ", ".join(parts)
    if stalled is not None and stalled.status == "True":
        text += f"; stalled since {stalled.last_transition}: {stalled.message}"
    return text


def print_status(lines: Sequence[StatusLine], stream: IO[str] | None = None,
                 controller: ControllerStatus | None = None,
                 epochs: Sequence[SetEpochs] = ()) -> None:
    """Each lineage's block; a set's members under the set's heading and their cell's
    (indented), a set's orphans in their cells, marked ``orphaned``, as plan shows them;
    a selected set's epochs under its heading (``epochs``).
    ``controller``: `ouro controller`'s block first."""
    console = _console(stream)
    for text, style in controller_lines(controller) if controller is not None else ():
        console.print(rich_text(text), style=style)
    members = [line.member for line in lines]
    by_set = {found.set_name: found for found in epochs}
    for i, line in enumerate(lines):
        shown = headings(members, i)
        for j, heading in enumerate(shown):
            console.print(rich_text(heading), style="bold")
            if j == 0 and line.member is not None and line.member.set_name in by_set \
                    and heading.startswith("set "):
                for text in epoch_lines(by_set.pop(line.member.set_name)):
                    console.print(rich_text(text))
        _status_block(console, line, indent(line.member))


def _status_block(console: Console, line: StatusLine, pad: str) -> None:
    report = line.report
    outcomes = ", ".join(f"{count} {name}" for name, count in report.outcomes.items())
    deaths = ", ".join(f"{count} {kind}" for kind, count in report.death_kinds.items())
    console.print(rich_text(f"{pad}{line.name}: {plural(report.generations, 'generation')} "
                            f"({outcomes})"),
                  style="bold")
    if line.member is not None and line.member.orphaned:
        console.print(rich_text(f"{pad}  {ORPHANED.format(line.member.set_name)}"),
                      style="yellow")
    if line.running:
        console.print(rich_text(f"{pad}  {line.running}"), style="yellow")
    else:  # a running generation's own marker, when no lock holder is known
        for running in report.generation_running:
            console.print(rich_text(f"{pad}  running: {running}"), style="yellow")
    if line.until is not None:
        console.print(rich_text(f"{pad}  done ({line.until.code}): {line.until.message}"),
                      style="green")
    if line.member is not None and line.member.not_selected is not None:
        console.print(rich_text(f"{pad}  {stopped_text(line.member.not_selected)}"),
                      style="yellow")
    if line.labels:
        console.print(rich_text(f"{pad}  labels: {_labels(line.labels)}"))
    if line.conditions is not None:
        console.print(rich_text(f"{pad}  conditions: {conditions_text(line.conditions)}"),
                      style="red" if line.conditions.stalled else None)
    places = line.places()
    if places is not None:
        console.print(rich_text(f"{pad}  worktree: {places['worktree']}"))
        console.print(rich_text(f"{pad}  git dir: {places['git_dir']}"))
        console.print(rich_text(f"{pad}  observations: {places['observations']}"))
    if deaths:
        console.print(rich_text(f"{pad}  deaths: {deaths}"))
    if report.model_failures:
        console.print(rich_text(
            f"{pad}  model failed in {plural(report.model_failures, 'generation')}"))
    last = report.last_model_failure
    if last is not None:
        console.print(rich_text(
            f"{pad}  last generation (gen {last.get('generation')}): {last.get('message')} "
            f"({last.get('code')}, "
            f"{finality(last.get('retryable') is True, last.get('stops_lineage') is True)})"),
            style="red")
    console.print(rich_text(f"{pad}  accounted model spend: ${report.accounted_usd}"))
    console.print(rich_text(f"{pad}  last journal entry: "
                            f"{report.last_journal_heading or 'none yet'}"))
    console.print(rich_text(f"{pad}  heads: lineage {report.lineage_head or 'none yet'}, "
                            f"observations {report.observation_head or 'none yet'}"))
    if line.kernel is not None:
        console.print(rich_text(f"{pad}  kernel: {line.kernel.message}"),
                      style="red" if line.kernel.source is None else None)
    for problem in report.problems:
        console.print(rich_text(f"{pad}  problem: {problem}"), style="red")
