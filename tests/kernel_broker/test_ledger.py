"""The spending ledger at its edges, alone and inside a running broker.

Prices of 1 USD per token (1,000,000 per million) make every amount a token count.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from reconciler.kernel.base.config import ModelConfig, Price
from reconciler.kernel.broker.ledger import (
    PROMPT_FRAMING_TOKENS,
    Ledger,
    Usage,
    usd_text,
    worst_case_usd,
)
from tests.fakes.broker_client import post, start_broker
from tests.fakes.provider_server import FakeProvider, Reply, chat_ok, script

DOLLAR_A_TOKEN = Price(Decimal(1_000_000), Decimal(1_000_000))
PROMPT = "abcd"  # 4 bytes: worst case = 4 + framing + output tokens
FRAMED = 4 + PROMPT_FRAMING_TOKENS


def test_worst_case_is_prompt_bytes_plus_framing_plus_output() -> None:
    assert worst_case_usd(DOLLAR_A_TOKEN, 4, 10) == Decimal(FRAMED + 10)
    price = Price(Decimal("3.00"), Decimal("15.00"))
    # (1000 + 4096 framing) * 3 + 2000 * 15, per million: the original instrument's allowance
    assert worst_case_usd(price, 1000, 2000) == Decimal("0.045288")


LEDGER_EDGES = [
    pytest.param(FRAMED + 10, 10, True, id="exactly-the-budget"),
    pytest.param(FRAMED + 10, 11, False, id="one-output-token-over"),
    pytest.param(Decimal(FRAMED + 10) - Decimal("0.000001"), 10, False, id="a-micro-dollar-short"),
    pytest.param(0, 1, False, id="zero-budget"),
]


@pytest.mark.parametrize(("budget", "tokens", "fits"), LEDGER_EDGES)
def test_reservation_fits_exactly_up_to_the_budget(budget: int | Decimal, tokens: int,
                                                    fits: bool) -> None:
    ledger = Ledger(Decimal(budget), DOLLAR_A_TOKEN)
    reservation = ledger.reserve(4, tokens)
    assert (reservation is not None) == fits
    assert ledger.spent + ledger.reserved <= ledger.budget


SETTLEMENTS = [
    pytest.param(Usage(30, 5), True, Decimal(35), id="usage-refunds-the-rest"),
    pytest.param(None, True, Decimal(FRAMED + 10), id="missing-usage-no-refund"),
    pytest.param(None, False, Decimal(0), id="never-billed-full-refund"),
    pytest.param(Usage(0, 0), True, Decimal(0), id="zero-usage"),
]


@pytest.mark.parametrize(("usage", "billable", "charged"), SETTLEMENTS)
def test_settlement(usage: Usage | None, billable: bool, charged: Decimal) -> None:
    ledger = Ledger(Decimal(10_000), DOLLAR_A_TOKEN)
    reservation = ledger.reserve(4, 10)
    assert reservation is not None and ledger.available == Decimal(10_000 - FRAMED - 10)
    assert ledger.settle(reservation, usage=usage, billable=billable) == charged
    assert ledger.reserved == 0 and ledger.spent == charged
    assert ledger.available == Decimal(10_000) - charged


def test_money_is_decimal_never_float() -> None:
    ledger = Ledger(Decimal("0.30"), Price(Decimal("0.10"), Decimal("0.20")))
    for _ in range(3):
        reservation = ledger.reserve(0, 0)
        assert reservation is not None
        ledger.settle(reservation, usage=Usage(1_000_000, 0), billable=True)
    assert ledger.spent == Decimal("0.30") and ledger.available == 0
    assert all(isinstance(v, Decimal) for v in (ledger.spent, ledger.reserved, ledger.budget))


# ---------------------------------------------------------------- inside the broker


def chat_model(url: str, budget: int | Decimal) -> ModelConfig:
    return ModelConfig(provider="openai-compatible", name="local", base_url=url,
                       price=DOLLAR_A_TOKEN, budget_usd=Decimal(budget),
                       max_output_tokens=1000, request_timeout_seconds=20)


BROKER_EDGES = [
    pytest.param(FRAMED + 10, 10, 200, 1, id="exactly-the-budget-is-served"),
    pytest.param(FRAMED + 10, 11, 402, 0, id="one-token-over-is-refused-unsent"),
]


@pytest.mark.parametrize(("budget", "tokens", "status", "sent"), BROKER_EDGES)
def test_broker_refuses_with_402_what_cannot_fit(tmp_path: Path, budget: int, tokens: int,
                                                 status: int, sent: int) -> None:
    with FakeProvider(script(chat_ok("ok", 4, 3))) as fake:
        broker = start_broker(tmp_path, chat_model(fake.url, budget))
        got, body = post(broker.socket_path, PROMPT, tokens=tokens)
        report = broker.stop()
    assert got == status and len(fake.requests) == sent
    (call,) = report.model_calls
    if status == 402:
        assert body == b"generation budget exhausted\n"  # the original words; no amounts
        assert call["error_detail"] == f"the worst case of {FRAMED + 11} USD does not fit the " \
            f"{FRAMED + 10} USD left"
        assert call["error"] == "budget_exhausted" and call["attempts"] == []
        assert call["accounted_usd"] == "0"
    else:
        assert call["reserved_usd"] == str(FRAMED + 10)
        assert Decimal(call["accounted_usd"]) == 7 == report.accounted_usd  # refunded to usage


def test_refunds_make_room_for_later_requests(tmp_path: Path) -> None:
    budget = 2 * (FRAMED + 10) - 1  # two worst cases do not fit, but usage leaves room
    with FakeProvider(script(chat_ok("ok", 4, 3))) as fake:
        broker = start_broker(tmp_path, chat_model(fake.url, budget))
        statuses = [post(broker.socket_path, PROMPT, tokens=10)[0] for _ in range(3)]
        report = broker.stop()
    assert statuses == [200, 200, 200]
    assert report.accounted_usd == 21


def test_missing_usage_is_charged_in_full_and_exhausts_the_budget(tmp_path: Path) -> None:
    no_usage = Reply(200, {"choices": [{"message": {"role": "assistant", "content": "ok"}}]})
    budget = 2 * (FRAMED + 10) - 1
    with FakeProvider(script(no_usage)) as fake:
        broker = start_broker(tmp_path, chat_model(fake.url, budget))
        statuses = [post(broker.socket_path, PROMPT, tokens=10)[0] for _ in range(2)]
        report = broker.stop()
    assert statuses == [200, 402] and len(fake.requests) == 1
    assert [c["accounted_usd"] for c in report.model_calls] == [str(FRAMED + 10), "0"]
    assert report.model_calls[0]["usage"] is None
    assert report.accounted_usd <= budget


def test_rate_limited_attempts_are_not_charged_and_retry_within_budget(tmp_path: Path) -> None:
    budget = FRAMED + 10  # room for exactly one worst case at a time
    replies = [Reply(429, {"error": "slow down"}, headers={"retry-after-ms": "50"}),
               Reply(529, headers={"retry-after": "0"}), chat_ok("ok", 4, 3)]
    with FakeProvider(script(*replies)) as fake:
        broker = start_broker(tmp_path, chat_model(fake.url, budget))
        status, _ = post(broker.socket_path, PROMPT, tokens=10)
        (call,) = broker.stop().model_calls
    assert status == 200 and len(fake.requests) == 3
    assert [a["accounted_usd"] for a in call["attempts"]] == ["0", "0", "7"]
    assert call["reserved_usd"] == str(3 * (FRAMED + 10)) and call["accounted_usd"] == "7"


def test_reservations_hold_across_retries(tmp_path: Path) -> None:
    """A response cut mid-body may have been billed: no refund, so the retry cannot fit."""
    budget = FRAMED + 10
    cut = Reply(200, body=b"", headers={"content-length": "100"})  # promises more than it sends
    with FakeProvider(script(cut, chat_ok("ok", 4, 3))) as fake:
        broker = start_broker(tmp_path, chat_model(fake.url, budget))
        status, _ = post(broker.socket_path, PROMPT, tokens=10)
        (call,) = broker.stop().model_calls
    assert status == 402, call
    assert len(call["attempts"]) == 1 and call["attempts"][0]["error"] == "transport_error"
    assert call["accounted_usd"] == str(budget)


def test_amounts_are_recorded_without_exponents() -> None:
    tiny = Price(Decimal("0.01"), Decimal("0.01")).worst_case(17, 17)
    assert str(tiny) == "3.4E-7" and usd_text(tiny) == "0.00000034"
