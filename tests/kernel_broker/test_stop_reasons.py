"""Stop reasons, truncation, clamping, spend that cannot lie, redaction and retry reports.

Real broker processes against loopback servers speaking each provider's wire
format; the organism's side is the socket (``exchange`` reads the reply headers).
"""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base.config import Ceilings, ModelConfig, Price, constraints_manifest
from reconciler.kernel.broker.door import BUDGET_BODY, TRUNCATED_HEADER, Broker
from reconciler.kernel.broker.ledger import PROMPT_FRAMING_TOKENS
from tests.fakes.broker_client import exchange, post, start_broker
from tests.fakes.provider_server import (
    FakeProvider,
    Reply,
    anthropic_ok,
    chat_ok,
    openai_error,
    openai_ok,
    script,
)

KEY = "sk-stop-0123456789abcdefghijklmnop"
PRICE = Price(Decimal("3.00"), Decimal("15.00"))


def model(provider: str, url: str, **overrides: Any) -> ModelConfig:
    values: dict[str, Any] = {"provider": provider, "name": "m", "price": PRICE,
                              "base_url": url, "budget_usd": Decimal("1.00"),
                              "request_timeout_seconds": 20, "max_output_tokens": 4000}
    values.update(overrides)
    return ModelConfig(**values)


def cut_anthropic() -> Reply:
    reply = anthropic_ok("(defun half")
    reply.json["stop_reason"] = "max_tokens"
    return reply


def cut_openai() -> Reply:
    reply = openai_ok("(defun half")
    reply.json.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    return reply


def cut_chat() -> Reply:
    reply = chat_ok("(defun half")
    reply.json["choices"][0]["finish_reason"] = "length"
    return reply


STOPS = [
    pytest.param("anthropic", anthropic_ok("whole"), "end_turn", None, False, id="anthropic-end"),
    pytest.param("anthropic", cut_anthropic(), "max_tokens", None, True, id="anthropic-cut"),
    pytest.param("openai", openai_ok("whole"), "completed", "completed", False, id="openai-end"),
    pytest.param("openai", cut_openai(), "max_output_tokens", "incomplete", True,
                 id="openai-incomplete"),
    pytest.param("openai-compatible", chat_ok("whole"), "stop", None, False, id="chat-stop"),
    pytest.param("openai-compatible", cut_chat(), "length", None, True, id="chat-length"),
]


@pytest.mark.parametrize(("provider", "reply", "reason", "status", "cut"), STOPS)
def test_every_call_records_its_stop_reason_and_a_cut_is_signalled(
        tmp_path: Path, provider: str, reply: Reply, reason: str, status: str | None,
        cut: bool) -> None:
    with FakeProvider(script(reply)) as fake:
        broker = start_broker(tmp_path, model(provider, fake.url), api_key=KEY)
        code, _, headers = exchange(broker.socket_path, "p", tokens=50)
        (call,) = broker.stop().model_calls
    assert code == 200
    assert call["stop_reason"] == reason and call["truncated"] is cut
    assert call["provider_response_status"] == status
    assert call["attempts"][-1]["stop_reason"] == reason
    assert (headers.get(TRUNCATED_HEADER.lower()) == "true") is cut


def test_more_tokens_than_allowed_are_clamped_not_refused(tmp_path: Path) -> None:
    with FakeProvider(script(chat_ok("ok", 10, 5))) as fake:
        broker = start_broker(tmp_path, model("openai-compatible", fake.url,
                                              max_output_tokens=1200))
        status, body = post(broker.socket_path, "p", tokens=99999)
        (call,) = broker.stop().model_calls
    assert (status, body) == (200, b"ok")
    assert fake.requests[0].json["max_tokens"] == 1200
    assert call["requested_output_tokens"] == 99999 and call["granted_output_tokens"] == 1200


def test_the_402_body_says_the_original_words(tmp_path: Path) -> None:
    with FakeProvider(script(chat_ok("ok"))) as fake:
        broker = start_broker(tmp_path, model("openai-compatible", fake.url,
                                              budget_usd=Decimal("0.000001")))
        status, body = post(broker.socket_path, "p", tokens=100)
        broker.stop()
    assert (status, body) == (402, BUDGET_BODY) == (402, b"generation budget exhausted\n")
    assert not fake.requests


@pytest.mark.parametrize(
    ("usage", "flagged"),
    [((10, 5), False), ((10_000_000, 5), True), ((10, 101), True)],
    ids=["plausible", "more-input-than-the-prompt", "more-output-than-granted"],
)
def test_usage_beyond_what_the_request_could_cost_is_recorded_as_reported_and_flagged(
        tmp_path: Path, usage: tuple[int, int], flagged: bool) -> None:
    """Accounted clamped to what the request could cost (physics release 2; issue 24:
    a broker before it accounted such a usage as reported)."""
    with FakeProvider(script(chat_ok("ok", *usage))) as fake:
        broker = start_broker(tmp_path, model("openai-compatible", fake.url,
                                              budget_usd=Decimal("100")))
        assert post(broker.socket_path, "p", tokens=100)[0] == 200
        report = broker.stop()
    (call,) = report.model_calls
    assert call["usage"] == {"input_tokens": usage[0], "output_tokens": usage[1]}
    assert call["usage_exceeds_request"] is flagged
    bounds = (len("p") + PROMPT_FRAMING_TOKENS, 100)  # the most the request could cost
    clamped = (min(usage[0], bounds[0]), min(usage[1], bounds[1]))
    assert Decimal(call["accounted_usd"]) == PRICE.worst_case(*clamped)
    assert Decimal(call["accounted_usd"]) <= Decimal(call["reserved_usd"])


@pytest.mark.parametrize("offset", [480, 495, 499, 4090], ids=["before", "across", "at", "far"])
def test_the_key_is_redacted_before_the_detail_is_cut(tmp_path: Path, offset: int) -> None:
    """A provider that quotes the key back, with the key straddling the cut."""
    message = "x" * offset + KEY + " is not valid"
    with FakeProvider(script(openai_error(401, "invalid_api_key", message))) as fake:
        broker = start_broker(tmp_path, model("openai", fake.url), api_key=KEY)
        post(broker.socket_path, "p")
        broker.stop()
    audit = (tmp_path / "private" / "audit.jsonl").read_text()
    for size in range(8, len(KEY) + 1):
        assert KEY[:size] not in audit, size


def test_retries_are_reported_to_the_parent_as_they_happen(tmp_path: Path) -> None:
    heard: list[dict[str, Any]] = []
    done = threading.Event()

    def listener(event: dict[str, Any]) -> None:
        heard.append(event)
        done.set()

    limited = Reply(429, {"error": {"message": "slow down", "type": "requests",
                                    "code": "rate_limit_exceeded"}},
                    headers={"retry-after-ms": "50"})
    with FakeProvider(script(limited, chat_ok("ok"))) as fake:
        config = model("openai-compatible", fake.url)
        broker = Broker.start(kernel_dir=tmp_path / "kernel", private_dir=tmp_path / "private",
                              model=config, constraints=constraints_manifest(Ceilings(), config),
                              api_key=None, generation=1, on_event=listener)
        assert post(broker.socket_path, "p")[0] == 200
        assert done.wait(5)
        broker.stop()
    (event,) = heard
    assert event["event"] == "retry" and event["request_index"] == 1
    assert (event["attempt"], event["of"], event["http_status"]) == (2, 6, 429)
    assert event["error"] == "rate_limited" and 0.04 <= event["wait_seconds"] < 1
