"""apply's text summary: an unknown audit says why, counts agree with their nouns, and every
lineage that spent generations on model failures is named."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

from reconciler.engine.apply import LineageResult
from reconciler.engine.session import ApplyOutcome
from reconciler.report.apply import apply_summary


def _outcome(*results: LineageResult, interrupted: bool = False) -> ApplyOutcome:
    return ApplyOutcome(list(results), interrupted, "interrupt" if interrupted else None, None)


def test_after_an_interrupt_an_unknown_audit_says_why() -> None:
    result = LineageResult("lam", "extend", generations_run=1, desired_generations=50,
                           outcomes=Counter({"no-change": 1}), final_action="extend",
                           final_generations=1)
    result.audit = {"status": "unknown", "resumed": 0, "findings": [], "why": "interrupted"}
    text = apply_summary(_outcome(result, interrupted=True))
    assert ("  verify: unknown (the audit was stopped by the interrupt: run `ouro verify` for "
            "a verdict)") in text
    result.audit = {"status": "unknown", "resumed": 0, "findings": []}  # an older verdict
    assert "verify: unknown (the audit gave no verdict: run `ouro verify` for one)" in \
        apply_summary(_outcome(result))


def test_one_generation_is_one_generation() -> None:
    result = LineageResult("solo", "create", generations_run=1, desired_generations=1,
                           outcomes=Counter({"changed": 1}), final_action="in-sync",
                           final_generations=1, spend_usd=Decimal(0))
    text = apply_summary(_outcome(result))
    assert "solo: in-sync, 1 of 1 generation; ran 1 (1 changed), spent $0" in text
    assert "Applied: 1 generation run, $0 spent." in text


def test_every_lineage_that_spent_generations_on_failures_is_named() -> None:
    broken = LineageResult("broken", "extend", generations_run=2, model_failures=2,
                           last_model_failure={"code": "unreachable", "generation": 7},
                           stopped="provider-unavailable", desired_generations=9)
    partly = LineageResult("partly", "extend", generations_run=3, model_failures=1,
                           last_model_failure={"code": "server_error"}, desired_generations=3)
    fine = LineageResult("fine", "extend", generations_run=3, desired_generations=3)
    text = apply_summary(_outcome(broken, partly, fine))
    assert ("Generations spent on model failures: broken 2 generations (last: gen 7, "
            "unreachable; stopped: provider-unavailable); partly 1 generation (last: "
            "server_error).") in text
    assert "fine" not in text.split("Generations spent on model failures:")[1]
