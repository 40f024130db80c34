"""Model providers behind the broker, and the one place failures are classified.

Trusted harness; runs only inside the model broker process, which alone holds
the API key. Rules:
- ``classify`` is the only function that decides whether a failure is worth a
  retry; everything else reads ``ProviderFailure.retryable``.
- ``run_request`` is the only retry loop (tenacity: exponential backoff with
  jitter, ``retry-after``/``retry-after-ms`` honoured, everything inside the
  request timeout). Every attempt reserves its worst case in the ledger first
  and is recorded, retried or not.
- ``httpx`` is imported only by the HTTP providers, so offline brokers start fast.

Wire formats: ``anthropic`` (Messages API), ``openai`` (Responses API),
``openai-compatible`` (Chat Completions at a configured base URL); each base
URL as its provider's SDK spells it (``https://api.anthropic.com``,
``https://api.openai.com/v1``). Every reply's stop reason is read
(``stop_reason``, Responses ``status``/``incomplete_details``, ``finish_reason``)
and a reply cut off at the output-token limit is ``truncated``.

Bounded before it is allocated (the broker is a host process outside every
cgroup): a reply is asked for in identity encoding and read raw, never
inflated; one in any other ``Content-Encoding`` (``gzip``, stacked ``gzip,
gzip``, ...) is refused unread, and what is read stops at ``reply_limit``: 64
KiB plus 64 bytes per granted output token (never more than
``MAX_RESPONSE_BYTES``). Parsed JSON grows up to ~25 times its text
(``[{},{},...]``), so a body that could hold more than ``MAX_JSON_VALUES``
values is refused before it is parsed (``response_too_large``). A reply whose
JSON nests deeper than the reader allows,
whose text is not valid Unicode (a lone surrogate escape) or whose numbers do
not parse is a ``malformed_response`` naming the cause. A reported usage
beyond what the request could cost is accounted at the request's worst case
(clamped) and flagged ``usage_exceeds_request``. Offline:
``replay`` (a folder of responses, one per successful request, in name order,
counted across the lineage) and ``echo`` (always an empty reply).
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import json
import os
import random
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import tenacity

from ..base import registry
from ..base.config import ModelConfig
from .ledger import Ledger, Reservation, Usage, estimate_prompt_tokens, usd_text

if TYPE_CHECKING:
    import ssl

__all__ = [
    "DEFAULT_BASE_URLS",
    "KEYED_PROVIDERS",
    "MODEL_LIST_PATHS",
    "Completion",
    "Provider",
    "ProviderFailure",
    "RequestResult",
    "auth_headers",
    "base_url",
    "classify",
    "make_provider",
    "parse_retry_after",
    "redact",
    "replay_files",
    "run_request",
    "tls_context",
]

# What a provider is (its key, base URL, model list, wire format): ``base.registry``.
DEFAULT_BASE_URLS = registry.DEFAULT_BASE_URLS
# The free, authenticated request a probe makes (``GET`` below the base URL).
MODEL_LIST_PATHS = registry.MODEL_LIST_PATHS
KEYED_PROVIDERS = registry.KEYED_PROVIDERS  # a key is required; optional elsewhere
ANTHROPIC_VERSION = "2023-06-01"
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
# A 429 with one of these in its body is an exhausted account, not a rate limit.
QUOTA_MARKERS = ("insufficient_quota", "quota", "billing", "spend limit", "spending limit",
                 "credit balance", "usage limit")
MAX_ATTEMPTS = 6
MIN_ATTEMPT_SECONDS = 0.5  # no retry is started with less time than this left
MAX_RESPONSE_BYTES = 32 << 20
REPLY_BASE_BYTES = 64 << 10  # a reply's JSON framing, usage and stop reason
REPLY_BYTES_PER_TOKEN = 64  # a long token, JSON-escaped (an emoji as \ud83d\ude00 is 12)
MAX_JSON_VALUES = 250_000  # at ~80 bytes a value at most, ~20 MB parsed
DETAIL_CHARS = 500
REDACTED = "[redacted]"
ERROR_BODY_CHARS = 4096  # of an error response, decoded (after redaction) for its detail


# ---------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage | None
    stop_reason: str | None = None  # the provider's own word (end_turn, length, ...)
    provider_status: str | None = None  # Responses API ``status`` (completed, incomplete)
    truncated: bool = False  # cut off at the output-token limit (or otherwise incomplete)


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` cut out: before any truncation."""
    return text.replace(secret, REDACTED) if secret and secret in text else text


class ProviderFailure(Exception):
    """One failed attempt, already classified.

    ``reason`` is a short code for the audit; ``billable`` says whether the
    provider may have charged for it (decides the ledger's refund).
    """

    def __init__(self, reason: str, detail: str, *, retryable: bool, billable: bool,
                 http_status: int | None = None, retry_after: float | None = None,
                 usage: Usage | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.retryable = retryable
        self.billable = billable
        self.http_status = http_status
        self.retry_after = retry_after
        self.usage = usage


    def redacted(self, secret: str | None) -> ProviderFailure:
        """The same failure with ``secret`` cut out of its text (providers quote keys back)."""
        if not secret or secret not in self.detail:
            return self
        return ProviderFailure(self.reason, redact(self.detail, secret),
                               retryable=self.retryable, billable=self.billable,
                               http_status=self.http_status, retry_after=self.retry_after,
                               usage=self.usage)


class BudgetRefusal(Exception):
    """The next attempt's worst case does not fit the remaining budget."""


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``retry-after`` (seconds or HTTP date)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds is not None:
        try:
            value = float(milliseconds) / 1000
        except ValueError:
            value = -1.0
        if 0 <= value < 86400:
            return value
    text = lowered.get("retry-after")
    if text is None:
        return None
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
        seconds = max(seconds, 0.0)
    return seconds if 0 <= seconds < 86400 else None


def classify(*, status: int | None = None, headers: Mapping[str, str] | None = None,
             body: bytes = b"", exception: BaseException | None = None,
             secret: str | None = None) -> ProviderFailure:
    """The one place that decides retryable vs final, for a failed attempt.

    Either ``exception`` (a transport error) or ``status``/``headers``/``body``
    (a non-success response). ``secret`` (the key) is cut out of every text
    before it is shortened, so no part of it survives a cut.
    """
    if exception is not None:
        import httpx

        described = _describe(exception, secret)
        if isinstance(exception, httpx.ConnectError | httpx.ConnectTimeout):
            return ProviderFailure("connect_error", described, retryable=True, billable=False)
        if isinstance(exception, httpx.TimeoutException):
            return ProviderFailure("timeout", described, retryable=True, billable=True)
        if isinstance(exception, httpx.TransportError):
            return ProviderFailure("transport_error", described, retryable=True, billable=True)
        return ProviderFailure("client_error", described, retryable=False, billable=True)
    headers = headers or {}
    lowered = {key.lower(): value for key, value in headers.items()}
    window = ERROR_BODY_CHARS + (len(secret) if secret else 0)  # a key across the cut, whole
    text = redact(body[: window * 4].decode("utf-8", "replace")[:window], secret)
    text = text[:ERROR_BODY_CHARS]
    detail = f"HTTP {status}: {text[:DETAIL_CHARS]}"
    should_retry = lowered.get("x-should-retry", "").strip().lower()
    if status == 429 and any(marker in text.lower() for marker in QUOTA_MARKERS):
        return ProviderFailure("quota_exhausted", detail, retryable=False, billable=False,
                               http_status=status)
    if should_retry == "false":
        return ProviderFailure(f"http_{status}", detail, retryable=False, billable=False,
                               http_status=status)
    retryable = status in RETRYABLE_STATUSES or should_retry == "true"
    reason = {429: "rate_limited", 529: "overloaded"}.get(status or 0, f"http_{status}")
    return ProviderFailure(reason, detail, retryable=retryable, billable=False,
                           http_status=status,
                           retry_after=parse_retry_after(headers) if retryable else None)


def _describe(exception: BaseException, secret: str | None = None) -> str:
    return redact(f"{type(exception).__name__}: {exception}", secret)[:DETAIL_CHARS]


# ---------------------------------------------------------------- providers


class Provider(Protocol):
    name: str

    def attempt(self, prompt: str, max_tokens: int, timeout: float) -> Completion:
        """One try; raises ``ProviderFailure``."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StopReason:
    """Why a reply ended, in the provider's words, and whether it was cut off."""

    reason: str | None = None
    provider_status: str | None = None
    truncated: bool = False


@dataclass(frozen=True)
class WireFormat:
    """How one HTTP API spells a request and its answer."""

    path: str
    headers: Callable[[str | None], dict[str, str]]
    body: Callable[[ModelConfig, str, int], dict[str, Any]]
    text: Callable[[Any], str | None]
    usage: Callable[[Any], Usage | None]
    stop: Callable[[Any], StopReason]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage(payload: Any, input_keys: tuple[str, ...], output_key: str) -> Usage | None:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return None
    first = _int(usage.get(input_keys[0]))
    output = _int(usage.get(output_key))
    if first is None or output is None:
        return None
    extra = sum(_int(usage.get(key)) or 0 for key in input_keys[1:])
    return Usage(first + extra, output)


# Each wire's text: None when the reply carries no place for it (a missing reply: the
# final failure ``no_text``), else the text, "" included. An empty completion is a reply
# (physics release 5): the organism gets it as an empty body and keeps its version, as
# its prompt says; it is no model failure. Before, "" was ``no_text`` too.


def _anthropic_text(payload: Any) -> str | None:
    blocks = payload.get("content") if isinstance(payload, dict) else None
    if not isinstance(blocks, list):
        return None
    return "".join(block["text"] for block in blocks
                   if isinstance(block, dict) and block.get("type") == "text"
                   and isinstance(block.get("text"), str))


def _openai_text(payload: Any) -> str | None:
    items = payload.get("output") if isinstance(payload, dict) else None
    if not isinstance(items, list):
        return None
    return "".join(content["text"]
                   for item in items
                   if isinstance(item, dict) and isinstance(item.get("content"), list)
                   for content in item["content"]
                   if isinstance(content, dict) and content.get("type") == "output_text"
                   and isinstance(content.get("text"), str))


def _chat_text(payload: Any) -> str | None:
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def _bearer(key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} if key else {}


def _text_field(value: Any, key: str) -> str | None:
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


# Anthropic: a reply that hit max_tokens (or the context window) is incomplete.
ANTHROPIC_CUT = frozenset({"max_tokens", "model_context_window_exceeded"})
CHAT_CUT = frozenset({"length"})


def _anthropic_stop(payload: Any) -> StopReason:
    reason = _text_field(payload, "stop_reason")
    return StopReason(reason, None, reason in ANTHROPIC_CUT)


def _openai_stop(payload: Any) -> StopReason:
    status = _text_field(payload, "status")
    reason = _text_field(payload.get("incomplete_details") if isinstance(payload, dict)
                         else None, "reason")
    return StopReason(reason or status, status, status == "incomplete")


def _chat_stop(payload: Any) -> StopReason:
    choices = payload.get("choices") if isinstance(payload, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    reason = _text_field(first, "finish_reason")
    return StopReason(reason, None, reason in CHAT_CUT)


def _responses_body(model: ModelConfig, prompt: str, tokens: int) -> dict[str, Any]:
    return {"model": model.name, "input": prompt, "max_output_tokens": tokens,
            "store": model.store}


_WIRES: dict[registry.Wire, WireFormat] = {
    "anthropic-messages": WireFormat(
        path="/v1/messages",
        headers=lambda key: {"x-api-key": key or "", "anthropic-version": ANTHROPIC_VERSION},
        body=lambda model, prompt, tokens: {
            "model": model.name, "max_tokens": tokens,
            "messages": [{"role": "user", "content": prompt}],
        },
        text=_anthropic_text,
        usage=lambda payload: _usage(
            payload, ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"),
            "output_tokens"),
        stop=_anthropic_stop,
    ),
    "openai-responses": WireFormat(
        path="/responses",
        headers=_bearer,
        body=_responses_body,
        text=_openai_text,
        usage=lambda payload: _usage(payload, ("input_tokens",), "output_tokens"),
        stop=_openai_stop,
    ),
    "chat-completions": WireFormat(
        path="/chat/completions",
        headers=_bearer,
        body=lambda model, prompt, tokens: {
            "model": model.name, "max_tokens": tokens,
            "messages": [{"role": "user", "content": prompt}],
        },
        text=_chat_text,
        usage=lambda payload: _usage(payload, ("prompt_tokens",), "completion_tokens"),
        stop=_chat_stop,
    ),
}
# Each HTTP provider speaks the wire format its registry record names.
WIRE_FORMATS: dict[str, WireFormat] = {
    p.name: _WIRES[p.wire] for p in registry.REGISTRY if p.wire is not None}


def base_url(model: ModelConfig) -> str:
    """The API base of an HTTP provider: the spec's, else the provider's own (no trailing /)."""
    base = model.base_url or DEFAULT_BASE_URLS.get(model.provider)
    if not base:
        raise ValueError(f"provider {model.provider} needs a base_url")
    return base.rstrip("/")


def auth_headers(provider: str, key: str | None) -> dict[str, str]:
    """The headers that carry the key (and API version) for ``provider``."""
    return WIRE_FORMATS[provider].headers(key)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context every HTTP provider of this process verifies with (httpx's default:
    certifi's CA bundle, verification on), made at first use. The broker fork server
    makes it before it forks (it holds no key, and the context holds none), so a
    generation's broker does not load the CA bundle again: that was most of a forked
    broker's CPU (docs/benchmarks.md)."""
    import httpx

    return httpx.create_ssl_context()


class HttpProvider:
    """A provider reached over HTTPS/HTTP with httpx; its own retries are ours (none inside)."""

    def __init__(self, model: ModelConfig, api_key: str | None) -> None:
        import httpx

        self.name = model.provider
        self.config = model
        self.wire = WIRE_FORMATS[model.provider]
        self.url = base_url(model) + self.wire.path
        # identity only: a compressed reply is never inflated here (module docstring)
        self.headers = {"content-type": "application/json", "accept-encoding": IDENTITY,
                        **self.wire.headers(api_key)}
        self.secret = api_key
        self.client = httpx.Client(trust_env=False, follow_redirects=False,
                                   transport=httpx.HTTPTransport(retries=0,
                                                                 verify=tls_context()))

    def attempt(self, prompt: str, max_tokens: int, timeout: float) -> Completion:
        try:
            return self._attempt(prompt, max_tokens, timeout)
        except ProviderFailure as failure:
            redacted = failure.redacted(self.secret)
            if redacted is failure:
                raise
            raise redacted from None

    def _attempt(self, prompt: str, max_tokens: int, timeout: float) -> Completion:
        import httpx

        body = json.dumps(self.wire.body(self.config, prompt, max_tokens)).encode("utf-8")
        deadline = time.monotonic() + timeout  # httpx's read timeout is per read, not in total
        try:
            with self.client.stream("POST", self.url, content=body, headers=self.headers,
                                    timeout=httpx.Timeout(timeout)) as response:
                status, headers = response.status_code, dict(response.headers)
                encoding = _encoding(response.headers.get_list("content-encoding"))
                data = b"" if encoding else _read_raw(response, deadline,
                                                      reply_limit(max_tokens))
        except httpx.HTTPError as exc:
            raise classify(exception=exc, secret=self.secret) from exc
        if encoding and status != 200:  # the status still says what went wrong
            raise classify(status=status, headers=headers, secret=self.secret,
                           body=f"(a body in {encoding} encoding, not read)".encode())
        if encoding:
            raise ProviderFailure(
                "malformed_response",
                f"the reply is in {encoding} encoding, not the identity encoding asked for "
                "(the broker inflates nothing)"[:DETAIL_CHARS],
                retryable=False, billable=True, http_status=status)
        if status != 200:
            raise classify(status=status, headers=headers, body=data, secret=self.secret)
        payload = _parse_json(data, status, self.secret)
        usage = self.wire.usage(payload)
        text = self.wire.text(payload)
        stop = self.wire.stop(payload)
        _check_text(status, text=text, stop_reason=stop.reason,
                    provider_status=stop.provider_status)
        if text is None:
            detail = "the response carries no text"
            if stop.reason:
                detail += f" (stop reason {stop.reason})"
            raise ProviderFailure("no_text", detail, retryable=False, billable=True,
                                  http_status=status, usage=usage)
        return Completion(text, usage, stop.reason, stop.provider_status, stop.truncated)

    def close(self) -> None:
        self.client.close()


IDENTITY = "identity"


def _encoding(values: list[str]) -> str | None:
    """The reply's content coding when it is not identity (every header and every
    comma-separated layer counted, so ``gzip, gzip`` is named whole), else None."""
    layers = [layer.strip().lower() for value in values for layer in value.split(",")]
    layers = [layer for layer in layers if layer]
    if all(layer == IDENTITY for layer in layers):
        return None
    return ", ".join(layers)[:100]


def reply_limit(max_tokens: int) -> int:
    """The most bytes a reply granted ``max_tokens`` output tokens may carry."""
    return min(MAX_RESPONSE_BYTES, REPLY_BASE_BYTES + REPLY_BYTES_PER_TOKEN * max_tokens)


def _read_raw(response: Any, deadline: float, limit: int) -> bytes:
    """The body's bytes as sent, stopping past ``limit`` bytes or the deadline.

    Raw: httpx's decoders never run, so nothing grows beyond what the wire carried."""
    data = bytearray()
    for chunk in response.iter_raw():
        data += chunk
        if time.monotonic() > deadline:
            raise ProviderFailure("timeout", "the response outlasted the timeout",
                                  retryable=True, billable=True,
                                  http_status=response.status_code)
        if len(data) > limit:
            raise ProviderFailure("response_too_large",
                                  f"more than {limit} bytes (the reply's limit for its "
                                  "granted output tokens)", retryable=False, billable=True,
                                  http_status=response.status_code)
    return bytes(data)


def _parse_json(data: bytes, status: int, secret: str | None) -> Any:
    """A success body's JSON; ``malformed_response`` naming why it is not JSON ouro reads,
    ``response_too_large`` when it could hold more than ``MAX_JSON_VALUES`` values (every
    value after the first follows a comma, colon or opening bracket: counted in C, an
    upper bound)."""
    values = 1 + sum(data.count(mark) for mark in (b",", b":", b"[", b"{"))
    if values > MAX_JSON_VALUES:
        raise ProviderFailure("response_too_large",
                              f"the reply could hold {values} JSON values, more than "
                              f"{MAX_JSON_VALUES}", retryable=False, billable=True,
                              http_status=status)
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError as exc:  # the C reader's own depth limit: nothing deep is allocated
        raise ProviderFailure("malformed_response",
                              "the JSON nests deeper than the broker reads",
                              retryable=False, billable=True, http_status=status) from exc
    except (UnicodeDecodeError, ValueError) as exc:  # also an integer of > 4300 digits
        raise ProviderFailure("malformed_response",
                              redact(f"not JSON: {exc}", secret)[:DETAIL_CHARS],
                              retryable=False, billable=True, http_status=status) from exc


def _check_text(status: int, **fields: str | None) -> None:
    """Every text taken from a reply must be valid Unicode: JSON can spell a lone
    surrogate (``"\\ud800"``) that no UTF-8 writer downstream could encode."""
    for name, value in fields.items():
        if value is None:
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ProviderFailure(
                "malformed_response",
                f"the reply's {name.replace('_', ' ')} is not valid Unicode: {exc.reason} "
                f"at character {exc.start}",
                retryable=False, billable=True, http_status=status) from exc


def replay_files(folder: Path) -> list[Path]:
    """The responses of a replay folder: regular, non-hidden files in name order."""
    return sorted((path for path in folder.iterdir()
                   if not path.name.startswith(".") and path.is_file() and not path.is_symlink()),
                  key=lambda path: path.name)


def _read_reply(path: Path) -> bytes:
    """A reply file's bytes, never more than a provider's response may be (size checked
    before reading; opening never blocks on a FIFO swapped in)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RESPONSE_BYTES:
            raise OSError(f"not a regular file of at most {MAX_RESPONSE_BYTES} bytes "
                          f"({info.st_size} bytes)")
        data = handle.read(MAX_RESPONSE_BYTES + 1)
    if len(data) > MAX_RESPONSE_BYTES:
        raise OSError(f"more than {MAX_RESPONSE_BYTES} bytes")
    return data


class ReplayProvider:
    """Scripted responses; the cursor counts successful requests across the lineage."""

    name = "replay"

    def __init__(self, folder: Path, cursor: int) -> None:
        self.folder = folder
        self.cursor = cursor

    def attempt(self, prompt: str, max_tokens: int, timeout: float) -> Completion:
        files = replay_files(self.folder)
        if self.cursor >= len(files):
            raise ProviderFailure(
                "replay_exhausted",
                f"replay exhausted: response {self.cursor + 1} requested, "
                f"{len(files)} available in {self.folder}",
                retryable=False, billable=False)
        path = files[self.cursor]
        try:
            text = _read_reply(path).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProviderFailure("replay_unreadable", f"{path.name}: {exc}"[:DETAIL_CHARS],
                                  retryable=False, billable=False) from exc
        self.cursor += 1
        return Completion(text, None)

    def close(self) -> None:
        pass


class EchoProvider:
    """Always an empty reply: every generation is no-change."""

    name = "echo"

    def attempt(self, prompt: str, max_tokens: int, timeout: float) -> Completion:
        return Completion("", None)

    def close(self) -> None:
        pass


def make_provider(model: ModelConfig, api_key: str | None, replay_cursor: int) -> Provider:
    """The provider of ``model``; ``ValueError`` for a configuration it cannot serve."""
    if model.provider in WIRE_FORMATS:
        return HttpProvider(model, api_key)
    if model.provider == "replay":
        if model.replay_dir is None:
            raise ValueError("provider replay needs a replay folder")
        return ReplayProvider(model.replay_dir, replay_cursor)
    if model.provider == "echo":
        return EchoProvider()
    raise ValueError(f"unknown provider {model.provider!r}")


# ---------------------------------------------------------------- one request


@dataclass
class RequestResult:
    """What one broker request came to, across all its attempts."""

    completion: Completion | None = None
    failure: ProviderFailure | None = None
    budget_refused: bool = False
    attempts: list[dict[str, Any]] = field(default_factory=list)
    reserved: Decimal = Decimal(0)
    accounted: Decimal = Decimal(0)
    usage_exceeds_request: bool = False  # a reported usage the request could not have cost


def _now() -> str:
    return datetime.now(UTC).isoformat()


def run_request(provider: Provider, *, prompt: str, prompt_bytes: int, max_tokens: int,
                ledger: Ledger, timeout_seconds: float,
                checkpoint: Callable[[RequestResult, Decimal], None] | None = None,
                offline: bool = False,
                on_retry: Callable[[dict[str, Any]], None] | None = None) -> RequestResult:
    """Serve one request: reserve, attempt, settle, and retry what ``classify`` allows.

    ``checkpoint(result, outstanding)`` runs after each reservation, before the
    attempt, so a crash mid-request leaves its worst case on record. Offline
    providers (replay, echo) never reach a paid service: their attempts settle at zero.
    ``on_retry(event)`` hears of each retry before its wait (attempt, of, error,
    http_status, wait_seconds). A usage above what the request could have cost
    is recorded as reported, accounted clamped to the request's bounds (its worst
    case) and flagged (``usage_exceeds_request``).
    """
    result = RequestResult()
    deadline = time.monotonic() + timeout_seconds
    bounds = (estimate_prompt_tokens(prompt_bytes), max_tokens)  # the most it could cost

    def one_attempt() -> Completion:
        reservation = ledger.reserve(prompt_bytes, max_tokens)
        if reservation is None:
            raise BudgetRefusal()
        result.reserved += reservation.amount
        if checkpoint is not None:
            checkpoint(result, reservation.amount)
        started, clock = _now(), time.monotonic()
        entry: dict[str, Any] = {"attempt": len(result.attempts) + 1, "started_at": started}
        try:
            try:
                completion = provider.attempt(prompt, max_tokens,
                                              max(0.1, deadline - time.monotonic()))
            except ProviderFailure:
                raise
            except Exception as exc:  # a bug or a surprise: final, and assume it was billed
                raise ProviderFailure("internal_error", _describe(exc), retryable=False,
                                      billable=True) from exc
        except ProviderFailure as failure:
            _settle(entry, ledger, reservation, failure.usage, bounds,
                    billable=failure.billable and not offline, result=result)
            entry.update(duration_ms=_ms(clock), http_status=failure.http_status,
                         error=failure.reason, detail=failure.detail,
                         retryable=failure.retryable, retry_after_seconds=failure.retry_after)
            result.attempts.append(entry)
            raise
        _settle(entry, ledger, reservation, completion.usage, bounds, billable=not offline,
                result=result)
        entry.update(duration_ms=_ms(clock), http_status=200, error=None, detail=None,
                     retryable=None, retry_after_seconds=None,
                     stop_reason=completion.stop_reason, truncated=completion.truncated)
        result.attempts.append(entry)
        return completion

    def stop(state: tenacity.RetryCallState) -> bool:
        left = deadline - time.monotonic() - state.upcoming_sleep
        return state.attempt_number >= MAX_ATTEMPTS or left < MIN_ATTEMPT_SECONDS

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if not result.attempts:
            return
        last = result.attempts[-1]
        last["wait_ms"] = round(state.upcoming_sleep * 1000)
        if on_retry is not None:
            with contextlib.suppress(Exception):  # a report must never fail the request
                on_retry({"attempt": state.attempt_number + 1, "of": MAX_ATTEMPTS,
                          "error": last.get("error"), "http_status": last.get("http_status"),
                          "wait_seconds": round(state.upcoming_sleep, 3)})

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(
            lambda exc: isinstance(exc, ProviderFailure) and exc.retryable),
        wait=_wait, stop=stop, before_sleep=before_sleep, reraise=True,
    )
    try:
        result.completion = retrying(one_attempt)
    except BudgetRefusal:
        result.budget_refused = True
    except ProviderFailure as failure:
        result.failure = failure
    return result


def _settle(entry: dict[str, Any], ledger: Ledger, reservation: Reservation,
            usage: Usage | None, bounds: tuple[int, int], *, billable: bool,
            result: RequestResult) -> None:
    """Account the attempt: its usage as reported, clamped to ``bounds`` (input, output
    tokens the request could cost) for the ledger, so no reported number is spend; a
    usage beyond them is flagged (``usage_exceeds_request``)."""
    accounted = usage.clamped(*bounds) if usage is not None else None
    if usage is not None and accounted != usage:
        entry["usage_exceeds_request"] = True
        result.usage_exceeds_request = True
    charged = ledger.settle(reservation, usage=accounted, billable=billable)
    result.accounted += charged
    entry.update(usage=usage.as_record() if usage else None,
                 reserved_usd=usd_text(reservation.amount), accounted_usd=usd_text(charged))


def _wait(state: tenacity.RetryCallState) -> float:
    """Exponential backoff with jitter; a provider's retry-after wins (0: at once)."""
    failure = state.outcome.exception() if state.outcome else None
    backoff = min(30.0, 0.5 * 2 ** (state.attempt_number - 1))
    seconds = random.uniform(backoff / 2, backoff)
    if isinstance(failure, ProviderFailure) and failure.retry_after is not None:
        seconds = max(seconds, failure.retry_after) if failure.retry_after > 0 else 0.0
    return seconds


def _ms(since: float) -> int:
    return round((time.monotonic() - since) * 1000)
