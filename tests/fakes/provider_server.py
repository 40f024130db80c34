"""Loopback fake model providers that speak each provider's real wire format.

A ``FakeProvider`` is an HTTP server on 127.0.0.1 driven by a handler: a plain
function from the request it saw (and its 1-based number) to a ``Reply``.
``script(...)`` makes a handler that answers with the given replies in order
(the last one repeats). The ``*_ok`` helpers build realistic success bodies.

    with FakeProvider(script(Reply(429, headers={"retry-after": "1"}), anthropic_ok("hi"))) as fake:
        ... ModelConfig(provider="anthropic", base_url=fake.url, ...)
        fake.requests  # what the broker sent, in order
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Seen:
    """One request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    json: Any = None
    body: bytes | None = None  # raw body; wins over json
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to stall before answering (a hang)
    drip: float = 0.0  # seconds between body bytes (a trickle that never times a read out)


Handler = Callable[[Seen, int], Reply]


def script(*replies: Reply) -> Handler:
    """Answer request n with replies[n-1]; the last reply repeats."""

    def handler(_: Seen, number: int) -> Reply:
        return replies[min(number, len(replies)) - 1]

    return handler


def anthropic_ok(text: str, input_tokens: int = 1200, output_tokens: int = 800) -> Reply:
    return Reply(json={
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
        "model": "claude-test", "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": output_tokens,
                  "service_tier": "standard"},
    }, headers={"request-id": "req_test"})


def openai_ok(text: str, input_tokens: int = 1200, output_tokens: int = 800) -> Reply:
    return Reply(json={
        "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b", "object": "response",
        "created_at": 1741476542, "status": "completed", "model": "gpt-test",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": text, "annotations": []}]},
        ],
        "usage": {"input_tokens": input_tokens,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": output_tokens,
                  "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": input_tokens + output_tokens},
    })


def chat_ok(text: str, prompt_tokens: int = 1200, completion_tokens: int = 800) -> Reply:
    return Reply(json={
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1741476542,
        "model": "local-test",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


def anthropic_models() -> Reply:
    """``GET /v1/models``, as Anthropic answers it."""
    return Reply(json={"data": [{"type": "model", "id": "claude-test",
                                 "display_name": "Claude Test",
                                 "created_at": "2026-02-19T00:00:00Z"}],
                       "has_more": False, "first_id": "claude-test", "last_id": "claude-test"})


def openai_models() -> Reply:
    """``GET /v1/models``, as OpenAI (and compatible servers) answer it."""
    return Reply(json={"object": "list", "data": [
        {"id": "gpt-test", "object": "model", "created": 1686935002, "owned_by": "openai"}]})


def anthropic_error(status: int, kind: str, message: str) -> Reply:
    """An Anthropic error body (``authentication_error``, ``permission_error``,
    ``not_found_error``, ``rate_limit_error``, ``overloaded_error``, ...)."""
    return Reply(status, json={"type": "error", "error": {"type": kind, "message": message},
                               "request_id": "req_011CTest"})


def openai_error(status: int, code: str | None, message: str,
                 kind: str = "invalid_request_error") -> Reply:
    """An OpenAI error body (also what Chat Completions servers send)."""
    return Reply(status, json={"error": {"message": message, "type": kind, "param": None,
                                         "code": code}})


MODEL_LISTS: dict[str, Callable[[], Reply]] = {
    "anthropic": anthropic_models, "openai": openai_models, "openai-compatible": openai_models,
}

OK_REPLIES: dict[str, Callable[..., Reply]] = {
    "anthropic": anthropic_ok, "openai": openai_ok, "openai-compatible": chat_ok,
}


class FakeProvider:
    """A threaded loopback HTTP server; use as a context manager."""

    def __init__(self, handler: Handler, backlog: int = 5) -> None:
        """``backlog``: connections the listening socket queues (a fleet's hundreds of
        brokers connect at once; the standard library's 5 would drop their SYNs)."""
        self.handler = handler
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("content-length", "0"))
                seen = Seen(method, self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(length))
                with fake._lock:
                    fake.requests.append(seen)
                    number = len(fake.requests)
                reply = fake.handler(seen, number)
                if reply.delay:
                    time.sleep(reply.delay)
                body = reply.body if reply.body is not None else (
                    json.dumps(reply.json).encode() if reply.json is not None else b"")
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    if "content-length" in {k.lower() for k in reply.headers}:
                        self.close_connection = True  # a lie about the length: cut it short
                    else:
                        self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    if reply.drip:
                        for index in range(len(body)):
                            self.wfile.write(body[index:index + 1])
                            self.wfile.flush()
                            time.sleep(reply.drip)
                    else:
                        self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (a timeout test)

        server = type("_Server", (ThreadingHTTPServer,), {"request_queue_size": backlog})
        self.server = server(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    import socket

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}"
