"""A job's result document, back on the submitting side: nothing of the lineage is lost.

What a job returns goes through JSON (submitit's pickle holds the document); the
submitting apply reads it back (``result_from_document``) and adds the parts of a lineage
that took several jobs (``_merge``). Refusals, model failures and why the lineage
stopped must survive both.
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal

from reconciler.engine.apply import LineageResult
from reconciler.engine.executors.request import result_document, result_from_document
from reconciler.engine.executors.slurm import _merge
from reconciler.plan import Refusal

FAILURE = {"code": "quota", "http_status": 429, "retryable": False, "generation": 2,
           "message": "You exceeded your current quota"}


def _sent(result: LineageResult, stopped_by: str | None = None) -> tuple[LineageResult,
                                                                         str | None]:
    """Through the wire: the document as JSON text and back."""
    text = json.dumps(result_document(result, stopped_by=stopped_by), sort_keys=True)
    return result_from_document(json.loads(text), result.name)


def test_a_result_survives_the_round_trip_whole() -> None:
    result = LineageResult(
        "sl-x", "extend", generations_run=2, outcomes=Counter({"no-change": 2}),
        spend_usd=Decimal("0.125"), errors=["ouro: stopped after gen 2"],
        refusal="budget spent",
        refusals=(Refusal("provider-config", "budget spent"),
                  Refusal("kernel-unavailable", "no kernel")),
        recovered="discarded gen 3", final_action="refuse", final_generations=2,
        desired_generations=5, model_failures=2, last_model_failure=FAILURE, stopped="quota",
    )
    back, stopped_by = _sent(result, "deadline")
    assert stopped_by == "deadline"
    assert back.as_json() == result.as_json()
    assert back.refusals == result.refusals
    assert (back.model_failures, back.last_model_failure, back.stopped) == (2, FAILURE, "quota")


def test_the_parts_of_a_lineage_run_by_two_jobs_add_up() -> None:
    first, _ = _sent(LineageResult("sl-y", "extend", generations_run=2, model_failures=1,
                                   last_model_failure={**FAILURE, "generation": 1},
                                   spend_usd=Decimal("0.1")), "deadline")
    second, _ = _sent(LineageResult("sl-y", "extend", generations_run=1, model_failures=1,
                                    last_model_failure=FAILURE, stopped="quota",
                                    refusals=(Refusal("provider-config", "budget spent"),),
                                    refusal="budget spent", spend_usd=Decimal("0.05")))
    total = _merge(_merge(None, first), second)
    assert total.generations_run == 3 and total.spend_usd == Decimal("0.15")
    assert total.model_failures == 2
    assert total.last_model_failure == FAILURE  # the later job's failure is the last one
    assert total.stopped == "quota"
    assert total.refusals == (Refusal("provider-config", "budget spent"),)
    # a later part without a stop or a failure keeps what the earlier one said
    calm, _ = _sent(LineageResult("sl-y", "extend", generations_run=1))
    total = _merge(total, calm)
    assert (total.stopped, total.last_model_failure, total.model_failures) == (
        "quota", FAILURE, 2)
    assert total.refusals == (Refusal("provider-config", "budget spent"),)


def test_a_document_without_the_newer_fields_reads_as_none_of_them() -> None:
    document = result_document(LineageResult("sl-z", "create"), stopped_by=None)
    for key in ("reasons", "model_failures", "last_model_failure", "stopped"):
        del document["result"][key]
    back, _ = result_from_document(document, "sl-z")
    assert (back.refusals, back.model_failures, back.last_model_failure, back.stopped) == (
        (), 0, None, None)
