"""The provider check: before a generation is spent on a provider, one free,
authenticated request (not a spec probe: those are ``engine.probes``).

Rule: a wrong key, a host that does not answer, a TLS or DNS failure costs
nothing but this request, and the lineage is refused before anything is
created or run. The request is the provider's model list (``GET {base}/models``
for OpenAI and compatible servers, ``GET /v1/models`` for Anthropic), with the
key in the same headers the broker sends, and nowhere else: never in argv, an
environment, a file or a message (every message names the variable, never the
value, and provider text is redacted before it is cut). A server without a
model list (404, 405) passes: the probe asks "can I reach you, and do you take
this key", not "do you list models". Other answers (429, 5xx) pass with a note:
the generation's own retries deal with them.

One ``Prober`` per apply probes each provider configuration (provider, base
URL, key variable) once, however many lineages share it.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reconciler.kernel.base import registry
from reconciler.kernel.base.config import ModelConfig

if TYPE_CHECKING:
    import httpx

__all__ = ["PROBE_TIMEOUT_SECONDS", "ProbeResult", "Prober", "probe"]

PROBE_TIMEOUT_SECONDS = 15.0
NO_MODEL_LIST = frozenset({404, 405, 501})
REFUSED_KEY = frozenset({401, 403})
BODY_LIMIT = 64 << 10


@dataclass(frozen=True)
class ProbeResult:
    """What the probe found: ``ok`` False refuses the lineage; ``message`` and ``remedy``
    name the provider, the URL and the key variable, never the key."""

    ok: bool
    code: str  # ok, no-model-list, answered, key-refused, dns, tls, unreachable, timeout
    message: str
    remedy: str = ""
    http_status: int | None = None

    def __str__(self) -> str:
        return f"{self.message}; {self.remedy}" if self.remedy else self.message


def _key_phrase(model: ModelConfig, sent: bool) -> str:
    """The key the request carried: a key that was not sent is never named as refused."""
    if sent and model.api_key_env:
        return f"the key in {model.api_key_env}"
    if model.api_key_env:
        return f"no key ({model.api_key_env} is not set)"
    return "no key (api_key_env: null)"


def _transport_failure(model: ModelConfig, url: str, error: Exception,
                       secret: str | None) -> ProbeResult:
    """DNS, TLS, refused connection or timeout, each with its own remedy."""
    import httpx

    from reconciler.kernel.broker.providers import DETAIL_CHARS, redact

    text = redact(f"{type(error).__name__}: {error}", secret)[:DETAIL_CHARS]
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and len(chain) < 8:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    where = f"provider {model.provider} at {url}"
    lowered = " ".join(str(c) for c in chain).lower()
    if any(isinstance(c, ssl.SSLError) for c in chain) or "ssl" in lowered \
            or "certificate" in lowered or "tls" in lowered:
        return ProbeResult(False, "tls", f"{where}: TLS failed ({text})",
                           "check base_url's scheme (http or https) and the server's "
                           "certificate")
    if "name or service not known" in lowered or "nodename nor servname" in lowered \
            or "getaddrinfo" in lowered or "temporary failure in name resolution" in lowered \
            or "no address associated" in lowered:
        return ProbeResult(False, "dns", f"{where}: the host name does not resolve ({text})",
                           "check the host in base_url and this machine's DNS")
    if isinstance(error, httpx.TimeoutException):
        return ProbeResult(False, "timeout",
                           f"{where}: no answer within {PROBE_TIMEOUT_SECONDS:.0f}s ({text})",
                           "check that the server is up and reachable from here "
                           "(or pass --no-provider-check)")
    return ProbeResult(False, "unreachable", f"{where}: cannot connect ({text})",
                       "check that the server is running and base_url is right")


def probe(model: ModelConfig, api_key: str | None, *,
          transport: httpx.BaseTransport | None = None,
          timeout: float = PROBE_TIMEOUT_SECONDS) -> ProbeResult:
    """One model-list request for ``model``'s provider configuration. Never raises for
    anything the network or server does. (httpx is imported here: an apply with nothing
    to probe, in sync or offline, never pays for it.)"""
    if model.provider in registry.OFFLINE_PROVIDERS:  # (nor httpx's import, ~50 ms)
        return ProbeResult(True, "ok", f"provider {model.provider} reaches no server")
    import httpx

    from reconciler.kernel.broker.providers import auth_headers, base_url

    try:
        url = base_url(model) + registry.MODEL_LIST_PATHS[model.provider]
    except (ValueError, KeyError) as error:
        return ProbeResult(False, "config", f"provider {model.provider}: {error}",
                           "set spec.model.base_url")
    # identity only, read raw: a compressed body is never inflated here (a few KB of
    # stacked gzip grow to gigabytes), as the kernel's broker does for replies.
    headers = {"accept": "application/json", "accept-encoding": "identity",
               **auth_headers(model.provider, api_key)}
    client = httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout,
                          transport=transport or httpx.HTTPTransport(retries=0))
    try:
        with client, client.stream("GET", url, headers=headers) as response:
            body = bytearray()
            for chunk in response.iter_raw():
                body += chunk
                if len(body) > BODY_LIMIT:
                    break
            status = response.status_code
    except httpx.HTTPError as error:
        return _transport_failure(model, url, error, api_key)
    except (OSError, ValueError) as error:  # e.g. an invalid URL that passed the spec
        return _transport_failure(model, url, error, api_key)
    return _answer(model, url, status, bytes(body), api_key)


def _answer(model: ModelConfig, url: str, status: int, body: bytes,
            secret: str | None) -> ProbeResult:
    where = f"provider {model.provider} at {url}"
    sent = bool(secret)
    if 200 <= status < 300:
        return ProbeResult(True, "ok", f"{where} accepts {_key_phrase(model, sent)}",
                           http_status=status)
    if status in REFUSED_KEY:
        from reconciler.kernel.broker.providers import redact

        text = redact(body[: BODY_LIMIT].decode("utf-8", "replace"), secret)[:200].strip()
        variable = model.api_key_env
        if sent:
            remedy = f"set {variable} to a valid key for this provider (and base_url)"
            refused = f"refused {_key_phrase(model, sent)}"
        else:
            remedy = (f"this server wants a key: set {variable}" if variable else
                      "this server wants a key: name its variable in spec.model.api_key_env "
                      "and set it")
            refused = f"wants a key and was sent {_key_phrase(model, sent)}"
        return ProbeResult(False, "key-refused",
                           f"{where} {refused} (HTTP {status}"
                           + (f": {text}" if text else "") + ")",
                           remedy, http_status=status)
    if status in NO_MODEL_LIST:
        return ProbeResult(True, "no-model-list",
                           f"{where} answers (HTTP {status}: no model list to check the key "
                           "against)", http_status=status)
    return ProbeResult(True, "answered",
                       f"{where} answers HTTP {status}; the generation's retries will see",
                       http_status=status)


class Prober:
    """Probes each provider configuration once per apply; thread-safe."""

    def __init__(self, run: Callable[..., ProbeResult] = probe) -> None:
        self._run = run
        self._mutex = threading.Lock()
        self._results: dict[tuple[Any, ...], ProbeResult] = {}
        self._pending: dict[tuple[Any, ...], threading.Event] = {}

    @staticmethod
    def key(model: ModelConfig) -> tuple[Any, ...]:
        return (model.provider, model.base_url, model.api_key_env)

    def check(self, model: ModelConfig, api_key: str | None) -> ProbeResult:
        key = self.key(model)
        with self._mutex:
            if key in self._results:
                return self._results[key]
            waiting = self._pending.get(key)
            if waiting is None:
                self._pending[key] = threading.Event()
        if waiting is not None:  # another lineage is probing the same configuration
            waiting.wait()
            with self._mutex:
                return self._results[key]
        try:
            result = self._run(model, api_key)
        except Exception as error:  # a bug here must not take the apply down
            result = ProbeResult(False, "internal",
                                 f"provider {model.provider}: the probe failed "
                                 f"({type(error).__name__})", "run with --no-provider-check")
        with self._mutex:
            self._results[key] = result
            self._pending.pop(key).set()
        return result
