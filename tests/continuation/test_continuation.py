"""The failure record the kernel writes and the stop rule apply reads: tables of cases."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.kernel.base.failures import normalize_code, provider_failure, usage_exceeds_request
from reconciler.plan.continuation import decide, failure_note, replay_exhausted


def call(status: int | None, *attempts: tuple[str | None, int | None, bool | None]
         ) -> dict[str, Any]:
    return {"http_status": status, "attempts": [
        {"error": error, "http_status": code, "retryable": retryable}
        for error, code, retryable in attempts]}


OK = call(200, (None, 200, None))
AUTH = call(502, ("http_401", 401, False))
QUOTA = call(502, ("quota_exhausted", 429, False))
DOWN = call(502, ("http_503", 503, True), ("http_503", 503, True))
REFUSED = call(502, ("connect_error", None, True))
BUDGET = {"http_status": 402, "attempts": []}


@pytest.mark.parametrize(
    ("reason", "status", "code"),
    [("http_401", 401, "auth"), ("http_403", 403, "permission"),
     ("quota_exhausted", 429, "quota"), ("http_404", 404, "unknown_model"),
     ("http_400", 400, "invalid_request"), ("rate_limited", 429, "rate_limited"),
     ("overloaded", 529, "overloaded"), ("http_500", 500, "server_error"),
     ("connect_error", None, "unreachable"), ("timeout", None, "timeout"),
     ("no_text", 200, "bad_response"), ("replay_exhausted", None, "replay_exhausted"),
     ("http_418", 418, "other")],
    ids=lambda v: str(v),
)
def test_codes(reason: str, status: int | None, code: str) -> None:
    assert normalize_code(reason, status) == code


@pytest.mark.parametrize(
    ("calls", "expected"),
    [([], None), ([OK], None), ([BUDGET], None),
     ([AUTH], {"code": "auth", "http_status": 401, "retryable": False, "attempts": 1,
               "every_call_failed": True, "stops_lineage": True,
               "message": "model unavailable (401)"}),
     ([DOWN], {"code": "server_error", "retryable": True, "attempts": 2,
               "every_call_failed": True, "stops_lineage": False}),
     ([DOWN, QUOTA, OK], {"code": "quota", "retryable": False, "failed_calls": 2, "calls": 3,
                          "every_call_failed": False, "stops_lineage": True}),
     ([REFUSED], {"code": "unreachable", "http_status": None,
                  "message": "model unavailable (unreachable)"})],
    ids=["no-calls", "ok", "budget-is-no-provider-failure", "auth", "retryable",
         "first-final-wins", "no-status"],
)
def test_provider_failure(calls: list[dict[str, Any]], expected: dict[str, Any] | None) -> None:
    found = provider_failure(calls)
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert {key: found[key] for key in expected} == expected


def test_usage_flag_is_read_from_any_attempt() -> None:
    flagged = {"attempts": [{"usage_exceeds_request": True}]}
    assert usage_exceeds_request([OK, flagged]) and not usage_exceeds_request([OK, "x"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("calls", "usage", "streak", "limit", "code"),
    [([AUTH], False, 1, 3, "auth"), ([QUOTA], False, 1, 3, "quota"),
     ([DOWN], False, 2, 3, None), ([DOWN], False, 3, 3, "failed-generations"),
     ([DOWN, OK], False, 0, 1, None), ([OK], True, 0, 3, "usage-exceeds-request"),
     ([OK], False, 0, 3, None)],
    ids=["auth-at-once", "quota-at-once", "two-of-three", "three-of-three",
         "a-success-resets", "usage-lies", "healthy"],
)
def test_decide(calls: list[dict[str, Any]], usage: bool, streak: int, limit: int,
                code: str | None) -> None:
    stop = decide(provider_failure(calls), usage, failed_in_a_row=streak, max_failed=limit,
                  variable="OPENAI_API_KEY", model="gpt-5.6")
    assert (stop.code if stop else None) == code
    if stop is not None:
        assert "run apply again" in stop.message
    if code == "auth":
        assert stop is not None and "OPENAI_API_KEY" in stop.message


def test_plan_note() -> None:
    assert failure_note(3, provider_failure([AUTH])) == \
        "gen 3: model unavailable (401): auth, final"
    assert failure_note(3, None) is None


ASKED = {"code": "replay_exhausted", "reason": "replay_exhausted", "every_call_failed": True}


@pytest.mark.parametrize(
    ("done", "failure", "replies", "used", "expected"),
    [(5, None, 4, 3, None),  # a reply left for gen 6
     (5, None, 4, 4, "replay folder F has 4 replies, all used by gen 5; generation 6 has "
                     "none: add replies"),
     (0, None, 0, 0, "replay folder F has no replies; generation 1 has none: add replies"),
     (1, None, 1, 1, "replay folder F has 1 reply, all used by gen 1; generation 2 has none"),
     (6, ASKED, 4, 4, "all used by gen 6; generation 7 has none (gen 6 asked for another)"),
     (6, ASKED, 5, 4, None),  # a reply added since gen 6 asked for it
     (6, None, 4, None, None),  # replies used unknown, and gen 6 did not ask in vain
     (6, ASKED, 4, None, "replay folder F has 4 replies, all used by gen 6; generation 7")])
def test_replay_exhausted_before_the_generation(done: int, failure: dict[str, Any] | None,
                                                replies: int, used: int | None,
                                                expected: str | None) -> None:
    stop = replay_exhausted(done, failure, "F", replies, used)
    if expected is None:
        assert stop is None
    else:
        assert stop is not None and stop.code == "replay-exhausted"
        assert expected in stop.message
        assert stop.message.endswith("then run apply again")
