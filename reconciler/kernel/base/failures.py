"""A generation's model failure, normalized: what its observation records. Trusted harness.

Pure functions over the broker's ``model_calls`` records (no I/O). The broker
classifies every attempt (``providers.classify``: retryable or final); this
module reduces a generation's calls to one ``provider_failure`` record, or
None when no call ended in a provider failure:

    {"code": "auth", "http_status": 401, "retryable": false, "attempts": 1,
     "calls": 1, "failed_calls": 1, "every_call_failed": true,
     "reason": "http_401", "stops_lineage": true, "message": "model unavailable (401)"}

``code`` is one of ``CODES``. ``stops_lineage`` is true for a final failure that
another generation cannot fix (``STOPPING_CODES``): a rejected or unauthorised
key, an exhausted quota, an unknown model, a request the provider refuses.
The control plane reads these records to decide whether to go on; the kernel
only records them.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CODES",
    "STOPPING_CODES",
    "failed_every_call",
    "normalize_code",
    "provider_failure",
    "usage_exceeds_request",
]

CODES = (
    "auth", "permission", "quota", "unknown_model", "invalid_request", "rate_limited",
    "overloaded", "server_error", "timeout", "unreachable", "transport", "bad_response",
    "replay_exhausted", "internal", "other",
)
STOPPING_CODES = frozenset({"auth", "permission", "quota", "unknown_model", "invalid_request"})
MODEL_UNAVAILABLE = 502  # the broker's status for a request whose provider failed

_BY_REASON = {
    "quota_exhausted": "quota", "rate_limited": "rate_limited", "overloaded": "overloaded",
    "timeout": "timeout", "connect_error": "unreachable", "transport_error": "transport",
    "client_error": "transport", "malformed_response": "bad_response", "no_text": "bad_response",
    "response_too_large": "bad_response", "replay_exhausted": "replay_exhausted",
    "replay_unreadable": "replay_exhausted", "internal_error": "internal",
}
_BY_STATUS = {401: "auth", 403: "permission", 404: "unknown_model", 400: "invalid_request",
              413: "invalid_request", 422: "invalid_request", 402: "quota", 429: "rate_limited",
              529: "overloaded", 408: "timeout"}


def normalize_code(reason: str | None, http_status: int | None) -> str:
    """One of ``CODES`` for an attempt's ``error`` reason and provider HTTP status."""
    if reason in _BY_REASON:
        return _BY_REASON[reason]
    if isinstance(http_status, int):
        if http_status in _BY_STATUS:
            return _BY_STATUS[http_status]
        if http_status >= 500:
            return "server_error"
    return "other"


def _failed_attempt(call: dict[str, Any]) -> dict[str, Any] | None:
    """The last attempt of a call that ended in a provider failure, else None."""
    if call.get("http_status") != MODEL_UNAVAILABLE:
        return None
    attempts = call.get("attempts")
    if not isinstance(attempts, list) or not attempts or not isinstance(attempts[-1], dict):
        return None
    last: dict[str, Any] = attempts[-1]
    return last if last.get("error") else None


def provider_failure(calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The generation's failure record (module docstring), or None.

    The failure described is the first final one if any call had one, else the
    last failed call's.
    """
    records = [call for call in calls if isinstance(call, dict)]
    failed = [(call, attempt) for call in records
              if (attempt := _failed_attempt(call)) is not None]
    if not failed:
        return None
    finals = [pair for pair in failed if pair[1].get("retryable") is False]
    call, attempt = finals[0] if finals else failed[-1]
    status = attempt.get("http_status")
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    code = normalize_code(attempt.get("error"), status)
    retryable = attempt.get("retryable") is not False
    attempts = call.get("attempts")
    return {
        "code": code,
        "http_status": status,
        "retryable": retryable,
        "attempts": len(attempts) if isinstance(attempts, list) else None,
        "calls": len(records),
        "failed_calls": len(failed),
        "every_call_failed": len(failed) == len(records),
        "reason": attempt.get("error"),
        "stops_lineage": not retryable and code in STOPPING_CODES,
        "message": f"model unavailable ({status if status is not None else code})",
    }


def failed_every_call(failure: Any) -> bool:
    """Did every model call of the generation fail (a ``provider_failure`` record says so)?"""
    return isinstance(failure, dict) and failure.get("every_call_failed") is True


def usage_exceeds_request(calls: list[dict[str, Any]]) -> bool:
    """Did any attempt report more usage than its request could have cost?"""
    for call in calls:
        attempts = call.get("attempts") if isinstance(call, dict) else None
        for attempt in attempts if isinstance(attempts, list) else []:
            if isinstance(attempt, dict) and attempt.get("usage_exceeds_request") is True:
                return True
    return False
