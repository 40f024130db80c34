"""A provider's reply is bounded before the broker allocates it (physics release 2).

The broker is a host process outside every cgroup, so a reply must not grow it:
real broker processes against loopback servers speaking each provider's exact
wire format send a gzip bomb, stacked encodings, 200,000 nested lists, a lone
surrogate and a usage of 10^4000 tokens. The broker's peak RSS (its own
``VmHWM``, read from /proc) stays below 64 MiB above its baseline, and each
outcome is a recorded provider failure naming its cause (``malformed_response``)
or, for the usage, a reply whose spend is clamped and flagged.
"""

from __future__ import annotations

import functools
import gzip
import json
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base.config import ModelConfig, Price
from reconciler.kernel.base.failures import provider_failure
from reconciler.kernel.broker.door import Broker
from reconciler.kernel.broker.ledger import worst_case_usd
from tests.fakes.broker_client import post, start_broker
from tests.fakes.provider_server import OK_REPLIES, FakeProvider, Reply, script

PRICE = Price(Decimal("3.00"), Decimal("15.00"))
PROVIDERS = ("anthropic", "openai", "openai-compatible")
RSS_BOUND = 64 << 20  # the broker's peak may rise this much above its baseline, no more
PROMPT = "grow"
TOKENS = 12_000  # the default maximum: a reply may carry 64 KiB + 64 bytes a token


def model(provider: str, url: str) -> ModelConfig:
    return ModelConfig(provider=provider, name="m", price=PRICE, base_url=url,
                       budget_usd=Decimal("1.00"), request_timeout_seconds=30,
                       max_output_tokens=TOKENS)


@functools.cache
def bomb(layers: int) -> bytes:
    """A body of ``layers`` gzip layers that inflates to 256 MiB of zeros (two layers:
    a few KiB on the wire)."""
    if layers > 1:
        return gzip.compress(bomb(layers - 1), 9)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip member
    zeros = bytes(1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(256)) + packer.flush()


def ok_body(provider: str, text: str = "fine") -> Any:
    return OK_REPLIES[provider](text).json


def nested(provider: str, depth: int = 200_000) -> bytes:
    """The provider's own success body with its text replaced by ``depth`` nested lists."""
    body = json.dumps(ok_body(provider, "SLOT"))
    return body.replace('"SLOT"', "[" * depth + "]" * depth).encode()


def hwm(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def serve(tmp_path: Path, provider: str, hostile: Reply) -> tuple[int, int, dict[str, Any]]:
    """A plain reply first (the baseline: everything the broker imports is loaded), then
    ``hostile``; returns (the organism's status, the peak's rise, the hostile call)."""
    with FakeProvider(script(OK_REPLIES[provider]("warm"), hostile)) as fake:
        broker: Broker = start_broker(tmp_path, model(provider, fake.url), api_key="sk-test")
        try:
            assert post(broker.socket_path, PROMPT, tokens=TOKENS)[0] == 200
            baseline = hwm(broker.pid)
            status, _ = post(broker.socket_path, PROMPT, tokens=TOKENS)
            rise = hwm(broker.pid) - baseline
        finally:
            report = broker.stop()
        assert fake.requests[-1].headers.get("accept-encoding") == "identity"
    assert len(report.model_calls) == 2
    return status, rise, report.model_calls[1]


def values(provider: str, count: int) -> bytes:
    """The provider's success body with its text replaced by ``count`` empty objects."""
    body = json.dumps(ok_body(provider, "SLOT"))
    return body.replace('"SLOT"', "[" + "{}," * (count - 1) + "{}]").encode()


MALFORMED = "malformed_response"
TOO_LARGE = "response_too_large"
HOSTILE = [
    pytest.param(lambda p: Reply(body=bomb(1), headers={"content-encoding": "gzip"}),
                 MALFORMED, "gzip encoding", id="gzip-bomb"),
    pytest.param(lambda p: Reply(body=bomb(2), headers={"content-encoding": "gzip, gzip"}),
                 MALFORMED, "gzip, gzip encoding", id="stacked-gzip"),
    pytest.param(lambda p: Reply(body=bomb(2), headers={"content-encoding": "identity",
                                                        "Content-Encoding": "gzip"}),
                 MALFORMED, "identity, gzip encoding", id="two-headers"),
    pytest.param(lambda p: Reply(body=nested(p)), MALFORMED, "nests deeper", id="deep-nesting"),
    pytest.param(lambda p: Reply(json=ok_body(p, "(defun a () \ud800)")),
                 MALFORMED, "text is not valid Unicode", id="lone-surrogate"),
    pytest.param(lambda p: Reply(body=json.dumps(ok_body(p)).replace(
        '"fine"', "1" + "0" * 5000).encode()), MALFORMED, "not JSON", id="5000-digit-number"),
    pytest.param(lambda p: Reply(body=values(p, 150_000)), TOO_LARGE,
                 "JSON values, more than 250000", id="150,000-objects"),
    pytest.param(lambda p: Reply(body=values(p, 10 << 20)), TOO_LARGE,
                 f"more than {64 * 1024 + 64 * TOKENS} bytes", id="30-MiB-of-objects"),
]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("hostile", "reason", "cause"), HOSTILE)
def test_a_hostile_reply_is_a_recorded_failure_naming_its_cause_and_grows_nothing(
        tmp_path: Path, provider: str, hostile: Any, reason: str, cause: str) -> None:
    status, rise, call = serve(tmp_path, provider, hostile(provider))
    assert status == 502
    assert rise < RSS_BOUND, f"the broker grew {rise >> 20} MiB"
    (attempt,) = call["attempts"]  # final: not retried
    assert (call["http_status"], call["error"]) == (502, "model_unavailable")
    assert (attempt["error"], attempt["http_status"], attempt["retryable"]) == \
        (reason, 200, False)
    assert cause in attempt["detail"] and cause in call["error_detail"]
    failure = provider_failure([call])
    assert failure is not None
    assert (failure["code"], failure["reason"]) == ("bad_response", reason)
    # billable, unknown usage: the worst case is the spend, never more
    assert Decimal(call["accounted_usd"]) == worst_case_usd(PRICE, len(PROMPT), TOKENS)


def test_an_error_status_in_another_encoding_keeps_its_status_unread(tmp_path: Path) -> None:
    hostile = Reply(401, body=bomb(2), headers={"content-encoding": "gzip, gzip"})
    status, rise, call = serve(tmp_path, "anthropic", hostile)
    assert status == 502 and rise < RSS_BOUND
    (attempt,) = call["attempts"]
    assert (attempt["error"], attempt["http_status"]) == ("http_401", 401)
    assert "gzip, gzip encoding, not read" in attempt["detail"]
    assert call["accounted_usd"] == "0"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_absurd_usage_is_flagged_and_accounted_at_the_worst_case(
        tmp_path: Path, provider: str) -> None:
    absurd = 10 ** 4000
    reply = OK_REPLIES[provider]("(message \"hi\")", absurd, absurd)
    status, rise, call = serve(tmp_path, provider, reply)
    assert status == 200 and rise < RSS_BOUND
    worst = worst_case_usd(PRICE, len(PROMPT), TOKENS)
    assert call["usage_exceeds_request"] is True and call["attempts"][0]["usage_exceeds_request"]
    assert call["usage"] == {"input_tokens": absurd, "output_tokens": absurd}  # as reported
    assert Decimal(call["accounted_usd"]) == Decimal(call["reserved_usd"]) == worst
    assert Decimal(call["attempts"][0]["accounted_usd"]) == worst


def test_a_broker_bug_closes_its_requests_record_naming_the_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second net: whatever a reply does that no check foresaw, the request's audit
    ends as a 502 naming the error, not ``interrupted`` with the cause in the broker's
    log (which is deleted with the generation)."""
    from reconciler.kernel.base.config import Ceilings, constraints_manifest
    from reconciler.kernel.broker import process as broker_process
    from reconciler.kernel.broker import providers
    from reconciler.kernel.broker.door import model_json

    echo = ModelConfig(provider="echo", name="echo")
    service = broker_process.Service({
        "model": model_json(echo), "api_key": None, "generation": 1, "replay_cursor": 0,
        "private_dir": str(tmp_path), "constraints": constraints_manifest(Ceilings(), echo)})

    def reply_with_a_lone_surrogate(*args: Any, **kwargs: Any) -> Any:
        kwargs["checkpoint"](providers.RequestResult(), Decimal(0))  # the pending record
        return providers.RequestResult(completion=providers.Completion("\ud800", None))

    monkeypatch.setattr(providers, "run_request", reply_with_a_lone_surrogate)
    body = iter([PROMPT.encode()])
    headers = {"content-length": str(len(PROMPT)), "x-ouroboros-max-output-tokens": "5"}
    with pytest.raises(UnicodeEncodeError) as caught:
        service.serve(headers, lambda size: next(body))
    service.fail_in_flight(caught.value)
    service.audit.close()
    (call,) = Broker.read_audit(tmp_path)
    assert (call["http_status"], call["error"]) == (502, "model_unavailable")
    assert call["error_detail"].startswith("internal_error: UnicodeEncodeError:")
    service.fail_in_flight(caught.value)  # nothing in flight any more: no second record
    assert len((tmp_path / "audit.jsonl").read_text().splitlines()) == 2
