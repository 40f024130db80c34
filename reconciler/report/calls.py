"""What a generation's model calls and model failure say, as plain data. Pure; no I/O.

Read from an observation record (docs/contract.md, "Model failures, stop
reasons and the truncation signal"): each call's ``stop_reason`` (the
provider's own word), ``truncated``, ``usage_exceeds_request`` and error; the
generation's normalized ``provider_failure``. All of it is text a provider or
an organism could influence: taken only with the recorded type and cut to a
bounded length; callers escape it (HTML) or make it inert (terminal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.kernel.base.formats import usd_amount  # the one rule of a recorded amount

__all__ = ["CallStop", "Failure", "call_stops", "failure_of", "reservation"]

MAX_TEXT = 600  # a recorded text beyond this many characters is cut (and says so)


def _text(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + f"… ({len(value)} chars)"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class CallStop:
    """How one model call ended."""

    index: int | None
    http_status: int | None
    stop_reason: str | None  # the provider's word (end_turn, max_tokens, length, ...)
    truncated: bool  # the reply was cut off at the output-token limit
    usage_exceeds_request: bool
    error: str | None
    error_detail: str | None  # the provider's own error text (redacted by the broker)

    def summary(self) -> str:
        """One line: ``http 200, stop max_tokens, TRUNCATED``."""
        parts = [f"http {self.http_status if self.http_status is not None else '—'}",
                 f"stop {self.stop_reason or '—'}"]
        if self.truncated:
            parts.append("TRUNCATED (cut off at the output-token limit)")
        if self.usage_exceeds_request:
            parts.append("usage exceeds the request")
        if self.error:
            parts.append(f"error {self.error}")
        return ", ".join(parts)


def _detail(call: Mapping[str, Any]) -> str | None:
    detail = call.get("error_detail")
    if isinstance(detail, dict):
        detail = detail.get("message") or detail.get("detail")
    return _text(detail)


def call_stops(record: Mapping[str, Any] | None) -> list[CallStop]:
    """Each recorded model call's ending (calls that are not objects are skipped)."""
    calls = record.get("model_calls") if record is not None else None
    if not isinstance(calls, list):
        return []
    return [
        CallStop(
            index=_int(call.get("request_index")), http_status=_int(call.get("http_status")),
            stop_reason=_text(call.get("stop_reason")), truncated=call.get("truncated") is True,
            usage_exceeds_request=call.get("usage_exceeds_request") is True,
            error=_text(call.get("error")), error_detail=_detail(call),
        )
        for call in calls if isinstance(call, dict)
    ]


@dataclass(frozen=True)
class Failure:
    """A generation's recorded ``provider_failure`` (``malformed`` when not an object)."""

    code: str | None
    http_status: int | None
    message: str | None
    stops_lineage: bool
    retryable: bool | None
    every_call_failed: bool
    malformed: bool = False

    def summary(self) -> str:
        status = f"HTTP {self.http_status}" if self.http_status is not None else "no HTTP status"
        final = finality(self.retryable is not False, self.stops_lineage)
        calls = "every call failed" if self.every_call_failed else "some calls answered"
        return f"{self.message or 'model failure'} ({self.code or '?'}, {status}; {final}; {calls})"


def finality(retryable: bool, stops_lineage: bool) -> str:
    """How final a model failure is, in the one wording of status, plan, show and the
    viewer: "final" is a failure that is not retried (its ``retryable`` is false), and
    whether it also stops the lineage is said beside it."""
    if retryable:
        return "retryable"
    return "final; stops the lineage" if stops_lineage else "final; the lineage goes on"


def failure_of(record: Mapping[str, Any] | None) -> Failure | None:
    """The observation's ``provider_failure``, or None when it records none."""
    value = record.get("provider_failure") if record is not None else None
    if value is None:
        return None
    if not isinstance(value, dict):
        shown = _text(value) if isinstance(value, str) else f"({type(value).__name__})"
        return Failure(code=None, http_status=None, message=f"malformed provider_failure: {shown}",
                       stops_lineage=False, retryable=None, every_call_failed=False,
                       malformed=True)
    retryable = value.get("retryable")
    return Failure(
        code=_text(value.get("code")), http_status=_int(value.get("http_status")),
        message=_text(value.get("message")), stops_lineage=value.get("stops_lineage") is True,
        retryable=retryable if isinstance(retryable, bool) else None,
        every_call_failed=value.get("every_call_failed") is True,
    )


def reservation(call: Mapping[str, Any]) -> str:
    """What a call held of the budget, as a person should read it: each attempt reserves its
    worst case and returns it when it ends, so a retried call's recorded ``reserved_usd``
    (the sum over its attempts) is never held at once. Shown: the peak, said to be one."""
    attempts = call.get("attempts")
    amounts = [amount for attempt in (attempts if isinstance(attempts, list) else [])
               if isinstance(attempt, Mapping)
               and (amount := usd_amount(attempt.get("reserved_usd"))) is not None]
    if len(amounts) > 1:
        return (f"{max(amounts)} at most at once (the peak of {len(amounts)} attempts, each "
                "returned when it ended)")
    total = usd_amount(call.get("reserved_usd"))
    return str(total) if total is not None else "none"
