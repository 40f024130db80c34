"""The broker against loopback servers speaking each provider's wire format.

Every case runs a real broker process and a real HTTP server: the request the
provider receives is checked field by field, and every failure mode is checked
for its classification (retried or final), its attempts in the audit and the
status the organism sees.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base.config import ModelConfig, Price
from reconciler.kernel.broker.ledger import worst_case_usd
from tests.fakes.broker_client import post, start_broker
from tests.fakes.provider_server import (
    OK_REPLIES,
    FakeProvider,
    Handler,
    Reply,
    Seen,
    anthropic_ok,
    chat_ok,
    closed_port_url,
    openai_ok,
    script,
)

PRICE = Price(Decimal("3.00"), Decimal("15.00"))
KEY = "sk-test-0123456789abcdef"
PROMPT = "Write the next organism.\n— with an em dash, ünïcode and 🐍"


def model(provider: str, url: str, **overrides: Any) -> ModelConfig:
    values: dict[str, Any] = {
        "provider": provider, "name": f"{provider}-test-model", "price": PRICE,
        "base_url": url, "budget_usd": Decimal("1.00"), "request_timeout_seconds": 20,
        "max_output_tokens": 4000,
    }
    values.update(overrides)
    return ModelConfig(**values)


# ---------------------------------------------------------------- request shapes


def check_anthropic(seen: Seen) -> None:
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.json == {"model": "anthropic-test-model", "max_tokens": 321,
                         "messages": [{"role": "user", "content": PROMPT}]}


def check_openai(seen: Seen) -> None:
    assert seen.path == "/v1/responses"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in seen.headers
    assert seen.json == {"model": "openai-test-model", "input": PROMPT,
                         "max_output_tokens": 321, "store": False}


def check_chat(seen: Seen) -> None:
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.json == {"model": "openai-compatible-test-model", "max_tokens": 321,
                         "messages": [{"role": "user", "content": PROMPT}]}


SHAPES: list[Any] = [
    pytest.param("anthropic", "", check_anthropic, id="anthropic-messages"),
    pytest.param("openai", "/v1", check_openai, id="openai-responses"),
    pytest.param("openai-compatible", "/v1", check_chat, id="openai-compatible-chat"),
]


@pytest.mark.parametrize(("provider", "suffix", "check"), SHAPES)
def test_each_provider_speaks_its_wire_format(
        tmp_path: Path, provider: str, suffix: str, check: Callable[[Seen], None]) -> None:
    reply = OK_REPLIES[provider]("(message \"next\")", 1500, 300)  # within what it could cost
    with FakeProvider(script(reply)) as fake:
        broker = start_broker(tmp_path, model(provider, fake.url + suffix), api_key=KEY)
        status, body = post(broker.socket_path, PROMPT, tokens=321)
        report = broker.stop()
    assert (status, body) == (200, b'(message "next")')
    assert len(fake.requests) == 1
    check(fake.requests[0])
    assert fake.requests[0].headers["content-type"] == "application/json"
    (call,) = report.model_calls
    cost = PRICE.worst_case(1500, 300)
    assert call["usage"] == {"input_tokens": 1500, "output_tokens": 300}
    assert call["http_status"] == 200 and call["error"] is None
    assert call["response"] == '(message "next")'
    assert call["requested_output_tokens"] == call["granted_output_tokens"] == 321
    assert Decimal(call["reserved_usd"]) == worst_case_usd(PRICE, len(PROMPT.encode()), 321)
    assert Decimal(call["accounted_usd"]) == cost == report.accounted_usd
    assert [a["http_status"] for a in call["attempts"]] == [200]


def test_openai_compatible_sends_no_authorization_without_a_key(tmp_path: Path) -> None:
    with FakeProvider(script(chat_ok("hi"))) as fake:
        broker = start_broker(tmp_path, model("openai-compatible", fake.url))
        assert post(broker.socket_path, "p")[0] == 200
        broker.stop()
    assert "authorization" not in fake.requests[0].headers


def test_anthropic_cache_tokens_count_as_input(tmp_path: Path) -> None:
    reply = anthropic_ok("x", 100, 10)
    reply.json["usage"].update(cache_creation_input_tokens=20, cache_read_input_tokens=5)
    with FakeProvider(script(reply)) as fake:
        broker = start_broker(tmp_path, model("anthropic", fake.url), api_key=KEY)
        post(broker.socket_path, "p")
        (call,) = broker.stop().model_calls
    assert call["usage"] == {"input_tokens": 125, "output_tokens": 10}


# ---------------------------------------------------------------- failures


def http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


@dataclass
class Case:
    provider: str
    replies: list[Reply] | Handler | None  # None: nothing listens
    status: int  # what the organism sees
    attempts: list[int | None]  # provider status of each attempt (None: no response)
    errors: list[str | None] | None = None
    min_seconds: float = 0.0
    max_seconds: float = 15.0
    timeout: int = 20
    extra: dict[str, Any] = field(default_factory=dict)


QUOTA_BODY = {"error": {"message": "You exceeded your current quota, please check your plan "
                        "and billing details.", "type": "insufficient_quota",
                        "code": "insufficient_quota"}}
RATE_BODY = {"error": {"message": "Rate limit reached for requests", "type": "requests",
                       "code": "rate_limit_exceeded"}}
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

CASES = [
    pytest.param(Case("openai", [Reply(429, RATE_BODY, headers={"retry-after": "1"}),
                                 openai_ok("ok")],
                      200, [429, 200], ["rate_limited", None], min_seconds=1.0),
                 id="429-retry-after-seconds"),
    pytest.param(Case("openai", lambda seen, number: Reply(
                          429, RATE_BODY, headers={"retry-after": http_date(2)})
                      if number == 1 else openai_ok("ok"),
                      200, [429, 200], min_seconds=0.9),
                 id="429-retry-after-http-date"),
    pytest.param(Case("openai", [Reply(429, RATE_BODY, headers={"retry-after-ms": "1200",
                                                                "retry-after": "30"}),
                                 openai_ok("ok")],
                      200, [429, 200], min_seconds=1.2, max_seconds=10),
                 id="429-retry-after-ms-wins"),
    pytest.param(Case("anthropic", [Reply(529, OVERLOADED), Reply(529, OVERLOADED),
                                    anthropic_ok("ok")],
                      200, [529, 529, 200], ["overloaded", "overloaded", None]),
                 id="529-overloaded-retried"),
    pytest.param(Case("openai-compatible", [Reply(500, {"error": "boom"}),
                                            Reply(503, body=b"<html>unavailable</html>"),
                                            chat_ok("ok")],
                      200, [500, 503, 200]),
                 id="500-then-503-then-ok"),
    pytest.param(Case("openai-compatible", [Reply(502), Reply(504), Reply(500)], 502,
                      [502, 504, 500], timeout=3, min_seconds=0.5, max_seconds=4.5,
                      extra={"at_least": True}),
                 id="5xx-until-the-request-timeout"),
    pytest.param(Case("anthropic", [Reply(200, anthropic_ok("late").json, delay=30)], 502,
                      [None], ["timeout"], min_seconds=2.0, max_seconds=4.5, timeout=3),
                 id="hang-past-the-timeout"),
    pytest.param(Case("openai-compatible", [Reply(200, chat_ok("slow").json, drip=0.25)], 502,
                      [200], ["timeout"], min_seconds=2.0, max_seconds=4.5, timeout=3),
                 id="trickle-past-the-timeout"),
    pytest.param(Case("openai", [Reply(200, body=b'{"output": [')], 502, [200],
                      ["malformed_response"]),
                 id="malformed-json-final"),
    pytest.param(Case("openai", [Reply(200, {"status": "incomplete",
                                             "usage": {"input_tokens": 10,
                                                       "output_tokens": 4000}})],
                      502, [200], ["no_text"]),
                 id="no-output-final"),
    pytest.param(Case("anthropic", [Reply(200, {"usage": {}})], 502, [200], ["no_text"]),
                 id="no-content-final"),
    pytest.param(Case("openai-compatible", [Reply(200, {"choices": [{"message": {
        "content": None}}]})], 502, [200], ["no_text"]),
                 id="null-content-final"),
    # physics release 5: an empty completion is a reply (the organism keeps its version)
    pytest.param(Case("anthropic", [Reply(200, {"content": [], "usage": {}})], 200, [200],
                      [None], extra={"response": ""}),
                 id="empty-content-is-a-reply"),
    pytest.param(Case("openai-compatible", [Reply(200, {"choices": [{"message": {
        "content": ""}}]})], 200, [200], [None], extra={"response": ""}),
                 id="empty-chat-completion-is-a-reply"),
    pytest.param(Case("openai", [Reply(200, {"output": [{"type": "reasoning"}],
                                             "status": "completed"})], 200, [200], [None],
                      extra={"response": ""}),
                 id="empty-output-is-a-reply"),
    pytest.param(Case("anthropic", [Reply(401, {"type": "error", "error": {
        "type": "authentication_error", "message": "invalid x-api-key"}})],
                      502, [401], ["http_401"]),
                 id="401-final"),
    pytest.param(Case("openai", [Reply(403), Reply(200)], 502, [403], ["http_403"]),
                 id="403-final"),
    pytest.param(Case("openai", [Reply(404), Reply(200)], 502, [404], ["http_404"]),
                 id="404-final"),
    pytest.param(Case("openai", [Reply(400, {"error": {"message": "bad"}})], 502, [400]),
                 id="400-final"),
    pytest.param(Case("openai", [Reply(429, QUOTA_BODY, headers={"retry-after": "1"})], 502,
                      [429], ["quota_exhausted"]),
                 id="429-quota-exhausted-final"),
    pytest.param(Case("anthropic", [Reply(503, OVERLOADED, headers={"x-should-retry": "false"})],
                      502, [503], ["http_503"]),
                 id="x-should-retry-false-final"),
    pytest.param(Case("openai", [Reply(429, RATE_BODY, headers={"retry-after": "60"})], 502,
                      [429], max_seconds=3),
                 id="retry-after-beyond-timeout-gives-up-now"),
    pytest.param(Case("openai-compatible", None, 502, [None, None], ["connect_error"] * 2,
                      timeout=2, extra={"at_least": True}),
                 id="connection-refused-retried"),
]


@pytest.mark.parametrize("case", CASES)
def test_failures_are_classified_once_and_every_attempt_is_audited(
        tmp_path: Path, case: Case) -> None:
    def run(url: str) -> tuple[int, float, dict[str, Any]]:
        broker = start_broker(tmp_path, model(case.provider, url,
                                              request_timeout_seconds=case.timeout),
                              api_key=KEY)
        started = time.monotonic()
        status, _ = post(broker.socket_path, PROMPT)
        elapsed = time.monotonic() - started
        (call,) = broker.stop().model_calls
        return status, elapsed, call

    if case.replies is None:
        status, elapsed, call = run(closed_port_url())
    else:
        handler = case.replies if callable(case.replies) else script(*case.replies)
        with FakeProvider(handler) as fake:
            status, elapsed, call = run(fake.url)
        assert len(fake.requests) == len(call["attempts"])
    attempts = call["attempts"]
    assert status == call["http_status"] == case.status
    seen = [a["http_status"] for a in attempts]
    if case.extra.get("at_least"):
        assert len(seen) >= len(case.attempts) and seen[:len(case.attempts) - 1] == \
            case.attempts[:-1]
    else:
        assert seen == case.attempts
    if case.errors is not None:
        assert [a["error"] for a in attempts][:len(case.errors)] == case.errors
    assert case.min_seconds <= elapsed <= case.max_seconds, elapsed
    assert elapsed <= case.timeout + 1.5  # never past the request timeout
    assert [a["attempt"] for a in attempts] == list(range(1, len(attempts) + 1))
    for earlier in attempts[:-1]:
        assert earlier["retryable"] is True and earlier["wait_ms"] >= 0
    if status == 502:
        assert call["error"] == "model_unavailable"
        assert call["response"] is None and call["error_detail"]
        assert "wait_ms" not in attempts[-1]
    else:
        assert call["response"] == case.extra.get("response", "ok")


def test_retry_after_http_date_in_the_past_retries_at_once(tmp_path: Path) -> None:
    replies = [Reply(429, RATE_BODY, headers={"retry-after": http_date(-60)}), openai_ok("ok")]
    with FakeProvider(script(*replies)) as fake:
        broker = start_broker(tmp_path, model("openai", fake.url), api_key=KEY)
        assert post(broker.socket_path, "p")[0] == 200
        (call,) = broker.stop().model_calls
    assert call["attempts"][0]["retry_after_seconds"] == 0


def test_no_text_with_usage_is_charged_at_its_usage(tmp_path: Path) -> None:
    body = {"usage": {"input_tokens": 10, "output_tokens": 100}}  # no output at all
    with FakeProvider(script(Reply(200, body))) as fake:
        broker = start_broker(tmp_path, model("openai", fake.url), api_key=KEY)
        assert post(broker.socket_path, "p", tokens=100)[0] == 502
        report = broker.stop()
    assert report.accounted_usd == PRICE.worst_case(10, 100)
    assert report.model_calls[0]["usage"] == {"input_tokens": 10, "output_tokens": 100}


def test_an_empty_completion_is_an_empty_reply_charged_at_its_usage(tmp_path: Path) -> None:
    """Physics release 5 (issue 41): the organism gets 200 and an empty body, the call is
    recorded as answered (no error: no model failure), and its usage is charged."""
    body = {"output": [{"type": "message", "content": [{"type": "output_text", "text": ""}]}],
            "usage": {"input_tokens": 10, "output_tokens": 1}}
    with FakeProvider(script(Reply(200, body))) as fake:
        broker = start_broker(tmp_path, model("openai", fake.url), api_key=KEY)
        assert post(broker.socket_path, "p", tokens=100) == (200, b"")
        report = broker.stop()
    (call,) = report.model_calls
    assert (call["http_status"], call["error"], call["response"]) == (200, None, "")
    assert report.accounted_usd == PRICE.worst_case(10, 1)


def test_a_timed_out_attempt_is_charged_its_whole_reservation(tmp_path: Path) -> None:
    with FakeProvider(script(Reply(200, openai_ok("late").json, delay=30))) as fake:
        broker = start_broker(tmp_path, model("openai", fake.url, request_timeout_seconds=2),
                              api_key=KEY)
        assert post(broker.socket_path, "p", tokens=100)[0] == 502
        report = broker.stop()
    (call,) = report.model_calls
    assert Decimal(call["accounted_usd"]) == Decimal(call["reserved_usd"]) \
        == worst_case_usd(PRICE, 1, 100) == report.accounted_usd
