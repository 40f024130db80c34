"""Plan output: terraform-style text, a stable JSON document, a markdown PR comment."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest

from reconciler.kernel.base.config import Identity
from reconciler.plan import Change, LineagePlan, Plan, make_plan
from reconciler.report.render import (
    FORMAT_VERSION,
    plan_json,
    plan_markdown,
    print_plan,
    summary_line,
)

ME = Identity("r", "main", "a" * 40, "b" * 64)


def item(name: str, action: str, *, reason: str | None = None, missing: int = 0,
         spend: str = "0", changes: tuple[Change, ...] = ()) -> LineagePlan:
    return LineagePlan(
        name=name, action=action, reason=reason,  # type: ignore[arg-type]
        message=f"lineage {name}: {action} because", observed_generations=3,
        desired_generations=3 + missing, missing_generations=missing,
        max_spend_usd=Decimal(spend), changes=changes,
        heads={"lineage": "1" * 40, "observation": "2" * 40}, spec_sha256="c" * 64,
    )


def sample_plan() -> Plan:
    items = (
        item("alpha", "create", missing=3, spend="3.00"),
        item("beta", "extend", missing=2, spend="0.50",
             changes=(Change("model", "echo", "echo-2"),)),
        item("gamma", "in-sync"),
        item("delta", "refuse", reason="unbalanced"),
        item("eps", "ahead"),
        item("zeta", "recover", missing=1, spend="1"),
    )
    counts = {a: sum(1 for i in items if i.action == a)
              for a in ("create", "extend", "in-sync", "ahead", "recover", "refuse")}
    return Plan(lineages=items, instrument=ME, counts=counts)


def test_summary_line() -> None:
    assert summary_line(sample_plan()) == (
        "Plan: 1 to create, 1 to extend, 1 to recover, 1 in sync, 1 ahead, 1 refused. "
        "Worst-case spend: $4.50"
    )


def test_text_has_a_marker_per_lineage_and_no_colour_off_terminal() -> None:
    out = io.StringIO()
    print_plan(sample_plan(), out)
    text = out.getvalue()
    lines = text.splitlines()
    markers = {line.split()[1]: line[2] for line in lines if line[:2] == "  "
               and len(line) > 3 and line[2] in "+~=!" and line[3] == " "}
    assert markers == {"alpha": "+", "beta": "~", "gamma": "=", "delta": "!", "eps": "=",
                       "zeta": "~"}
    assert "model: 'echo' -> 'echo-2'" in text
    assert "\x1b[" not in text
    assert lines[-1].startswith("Plan: ")


def test_colour_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = io.StringIO()
    print_plan(sample_plan(), out)
    assert "\x1b[" in out.getvalue()


def test_json_document_is_stable() -> None:
    document = json.loads(plan_json(sample_plan()))
    assert document["format_version"] == FORMAT_VERSION == 1
    first = document["lineages"][0]
    assert set(first) >= {"name", "action", "reason", "message", "observed_generations",
                          "desired_generations", "missing_generations", "max_spend_usd",
                          "changes", "heads"}
    assert first["max_spend_usd"] == "3.00" and isinstance(first["max_spend_usd"], str)
    assert document["lineages"][1]["changes"] == [
        {"field": "model", "observed": "echo", "desired": "echo-2"}]
    assert document["summary"]["max_spend_usd"] == "4.50"
    assert document["summary"]["exit_code"] == 1
    assert document["kind"] == "ouro-plan"
    assert document["instrument"] == {"commit": "a" * 40, "fingerprint": "b" * 64}
    assert document["summary"] == {"create": 1, "extend": 1, "recover": 1, "in-sync": 1,
                                   "ahead": 1, "refuse": 1, "done": 0, "max_spend_usd": "4.50",
                                   "exit_code": 1}
    assert [(i["name"], i["action"], i["missing_generations"]) for i in document["lineages"]] \
        == [("alpha", "create", 3), ("beta", "extend", 2), ("gamma", "in-sync", 0),
            ("delta", "refuse", 0), ("eps", "ahead", 0), ("zeta", "recover", 1)]
    assert first["heads"] == {"lineage": "1" * 40, "observation": "2" * 40}
    assert first["spec_sha256"] == "c" * 64 and first["reason"] is None


def test_json_text_is_the_document_pretty_printed() -> None:
    """plan_json is the text form of plan_document: two-space indent, one trailing newline,
    non-ASCII kept as is."""
    text = plan_json(sample_plan())
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text.startswith('{\n  "format_version": 1,\n  "kind": "ouro-plan",\n')
    assert "lineage alpha: create because" in text


def test_markdown_puts_refusals_first() -> None:
    text = plan_markdown(sample_plan())
    headings = [line for line in text.splitlines() if line.startswith("#### ")]
    assert headings[0].startswith("#### ! refuse")
    assert [h.split()[2] for h in headings] == ["refuse", "recover", "create", "extend",
                                                "ahead", "in-sync"]
    assert "| `delta` | `unbalanced` | 3 |" in text
    assert "Worst-case spend: $4.50" in text


def test_markdown_escapes_pipes() -> None:
    plan = Plan(lineages=(item("a", "refuse", reason="unbalanced"),), instrument=ME,
                counts={"refuse": 1})
    plan = Plan(lineages=(LineagePlan(**{**plan.lineages[0].__dict__, "message": "a|b"}),),
                instrument=ME, counts={"refuse": 1})
    assert "a\\|b" in plan_markdown(plan)


def test_empty_plan() -> None:
    plan = make_plan([], ME)
    out = io.StringIO()
    print_plan(plan, out)
    assert out.getvalue().strip() == summary_line(plan)
    assert plan.exit_code == 0


def _twice_refused() -> Plan:
    from reconciler.plan import Refusal

    refusals = (Refusal("branch-mismatch", "lineage a: no branch 'lineage-a': check out"),
                Refusal("instrument-commit-drift", "lineage a: written by another | tool"))
    base = item("a", "refuse", reason="branch-mismatch")
    refused = LineagePlan(**{**base.__dict__, "message": refusals[0].message,
                             "refusals": refusals})
    return Plan(lineages=(refused,), instrument=ME, counts={"refuse": 1})


def test_every_reason_is_shown_in_text_json_and_markdown() -> None:
    plan = _twice_refused()
    out = io.StringIO()
    print_plan(plan, out)
    lines = out.getvalue().splitlines()
    assert "      branch-mismatch: lineage a: no branch 'lineage-a': check out" in lines
    assert "      instrument-commit-drift: lineage a: written by another | tool" in lines
    assert "3 generations observed" in lines[0]
    (document,) = json.loads(plan_json(plan))["lineages"]
    assert document["reason"] == "branch-mismatch"  # the first, for existing consumers
    assert document["message"] == "lineage a: no branch 'lineage-a': check out"
    assert document["reasons"] == [
        {"reason": "branch-mismatch", "message": "lineage a: no branch 'lineage-a': check out"},
        {"reason": "instrument-commit-drift",
         "message": "lineage a: written by another | tool"}]
    markdown = plan_markdown(plan)
    assert ("| `a` | `branch-mismatch`<br>`instrument-commit-drift` | 3 | lineage a: no "
            "branch 'lineage-a': check out<br>lineage a: written by another \\| tool |"
            ) in markdown


def test_json_of_a_lineage_that_is_not_refused_has_no_reasons() -> None:
    document = json.loads(plan_json(sample_plan()))
    assert all(entry["reasons"] == [] for entry in document["lineages"])


def test_the_plain_text_plan_is_what_rich_writes_off_a_terminal() -> None:
    """Off a terminal print_plan writes its lines itself (rich costs ~0.1 ms a line); what
    it writes is exactly what rich writes for the same lines: markup, tabs, controls,
    wide characters, long lines and trailing spaces alike."""
    from rich.console import Console

    from reconciler.report.escape import rich_text
    from reconciler.report.render import plan_text

    odd = ("[bold]x[/] \t\ttab\x1b[31mred\x07 \u5bbd\u5b57 \U0001f600 :smile: "
           + "long " * 80 + "  ")
    plan = Plan(lineages=(*sample_plan().lineages, item("odd", "refuse", reason=odd)),
                instrument=ME, counts={"refuse": 2})
    plan = Plan(lineages=tuple(
        LineagePlan(**{**vars(i), "message": i.message + odd}) for i in plan.lineages),
        instrument=ME, counts=plan.counts)
    rich = io.StringIO()
    console = Console(file=rich, highlight=False, soft_wrap=True, emoji=False)
    for line, style in plan_text(plan):
        console.print(rich_text(line), style=style)
    out = io.StringIO()
    print_plan(plan, out)
    assert out.getvalue() == rich.getvalue()
    assert "\ttab" not in out.getvalue() and "\\x1b[31mred\\x07" in out.getvalue()
