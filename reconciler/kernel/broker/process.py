"""The model broker's own process: serving, ledger, provider calls. Trusted harness.

Started by ``broker.Broker.start`` as ``python -E -m reconciler.kernel.broker.process``
with only PATH, LANG, HOME and TMPDIR in its environment. Its first stdin line is
the configuration (``broker.model_json``, the key among it); it then serves
``/generate`` on ``model.sock`` (see ``broker``'s docstring for the wire), audits
every request to ``audit.jsonl`` (flushed and synced), and exits on SIGTERM or
when its stdin reaches end of file (the parent is gone). Nothing here is imported
by the parent.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import resource
import signal
import socketserver
import sys
import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..base.config import MODEL_CALL_SCHEMA, OFFLINE_PROVIDERS
from .door import (
    AUDIT_FILE,
    BUDGET_BODY,
    CAPABILITIES_FILE,
    CEILING_MESSAGE,
    CEILING_STATUS,
    MESSAGES,
    REFUSED_FILE,
    SOCKET_FILE,
    TOKEN_HEADER,
    TRUNCATED_HEADER,
    capabilities,
    model_from_json,
)

MIN_REDACTED_KEY = 16
DRAIN_LIMIT = 16 << 20  # an oversized body is read and dropped up to this much
ERRORS = {400: "invalid_request", 402: "budget_exhausted", 502: "model_unavailable"}
REFUSAL_DELAY_S = 0.05  # a refused request waits this long: a firehose costs the host little

def _utc_now() -> str:
    return datetime.now(UTC).isoformat()


def _sha(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


class Service:
    """The broker's state: provider, ledger, audit file, request counter."""

    def __init__(self, config: dict[str, Any]) -> None:
        from .ledger import Ledger
        from .providers import make_provider

        self.model = model_from_json(config["model"])
        self.api_key: str | None = config["api_key"]
        self.generation = int(config["generation"])
        self.provider = make_provider(self.model, self.api_key, int(config["replay_cursor"]))
        self.ledger = Ledger(self.model.budget_usd, self.model.price)
        self.offline = self.model.provider in OFFLINE_PROVIDERS
        self.index = 0
        self.reply_headers: dict[str, str] = {}  # extra headers of the current reply
        self.private_dir = Path(config["private_dir"])
        self.audit = open(self.private_dir / AUDIT_FILE, "a", encoding="utf-8")  # noqa: SIM115 (lives as long as we do)
        limits = config["constraints"].get("model", {})
        self.max_requests: int | None = limits.get("max_requests")
        self.max_audited_bytes: int | None = limits.get("max_audited_bytes")
        self.audited_bytes = 0
        self.refused = 0
        self.in_flight: int | None = None  # the request being served, until it is answered

    def over_ceiling(self) -> bool:
        """Is the generation past its ceiling on audited requests or audited bytes?"""
        return (self.max_requests is not None and self.index >= self.max_requests) or (
            self.max_audited_bytes is not None and self.audited_bytes >= self.max_audited_bytes)

    def refuse_over_ceiling(self, length: int | None, read_body: Any) -> tuple[int, bytes]:
        """429 without asking the provider and without an audit record: only a count."""
        self.refused += 1
        _drain(read_body, min(length or 0, self.model.max_prompt_bytes))
        temporary = self.private_dir / f".{REFUSED_FILE}.tmp"
        temporary.write_text(json.dumps({"refused_requests": self.refused}), encoding="utf-8")
        os.replace(temporary, self.private_dir / REFUSED_FILE)
        time.sleep(REFUSAL_DELAY_S)
        return CEILING_STATUS, (f"{CEILING_MESSAGE} ({self.max_requests} requests, "
                     f"{self.max_audited_bytes} audited bytes): no more model calls in this "
                     "generation\n").encode()

    def write(self, record: dict[str, Any]) -> None:
        # ASCII, as the observation writes it: audited bytes are the bytes it will take
        line = json.dumps(record, ensure_ascii=True)
        # Provider errors are redacted where they arise; this second net is only safe for a
        # key too long to collide with the record's own text.
        if self.api_key and len(self.api_key) >= MIN_REDACTED_KEY:
            line = line.replace(self.api_key, "[redacted]")
        self.audit.write(line + "\n")
        self.audited_bytes += len(line.encode("utf-8")) + 1
        self.audit.flush()
        os.fsync(self.audit.fileno())

    def serve(self, headers: dict[str, str], read_body: Any) -> tuple[int, bytes]:
        """One /generate request: (status, body). Every request is audited, one that a
        broker bug ended too (``fail_in_flight``)."""
        self.in_flight = None
        answer = self._serve(headers, read_body)
        self.in_flight = None
        return answer

    def fail_in_flight(self, exc: BaseException) -> None:
        """Close the audit of a request a broker bug ended: a 502 naming the error, never
        left ``interrupted`` with the cause only in the broker's (deleted) log. Its spend
        stays the worst case its pending record holds."""
        if self.in_flight is None:
            return
        detail = f"internal_error: {type(exc).__name__}: {exc}"
        self.write({"schema": MODEL_CALL_SCHEMA, "request_index": self.in_flight,
                    "http_status": 502, "error": ERRORS[502],
                    "error_detail": detail.encode("utf-8", "replace").decode()[:500]})
        self.in_flight = None

    def _serve(self, headers: dict[str, str], read_body: Any) -> tuple[int, bytes]:
        """``serve``'s body.

        Longer than 80 lines because the request's checks run in the order the
        contract lists them, each refusal filling the same audit record; split, the
        record would be passed through every piece.
        """
        from .ledger import usd_text, worst_case_usd
        from .providers import run_request

        if self.over_ceiling():
            return self.refuse_over_ceiling(
                _positive_int(headers.get("content-length"), allow_zero=True), read_body)
        self.index += 1
        self.in_flight = self.index
        self.reply_headers = {}
        clock = time.monotonic()
        record: dict[str, Any] = {
            "schema": MODEL_CALL_SCHEMA, "generation": self.generation,
            "request_index": self.index, "operation": "generate", "started_at": _utc_now(),
            "duration_ms": None, "requested_output_tokens": None, "granted_output_tokens": None,
            "prompt": None, "prompt_bytes": None, "prompt_sha256": None,
            "response": None, "response_bytes": None, "response_sha256": None,
            "http_status": None, "error": None, "error_detail": None, "usage": None,
            "reserved_usd": None, "accounted_usd": "0", "attempts": [],
            # ouro's additions: why the reply ended, and spend the request could not cost
            "stop_reason": None, "provider_response_status": None, "truncated": None,
            "usage_exceeds_request": False,
        }

        stored: set[str] = set()  # prompt/response already in an earlier record of this call

        def write_once(fields: dict[str, Any]) -> None:
            """Each prompt and reply is stored once: a later record of the same request
            leaves out the texts an earlier one holds (``Broker.read_audit`` merges them)."""
            self.write({k: v for k, v in fields.items() if k not in stored})
            stored.update(k for k in ("prompt", "response") if fields.get(k) is not None)

        def finish(status: int, body: bytes, detail: str | None = None) -> tuple[int, bytes]:
            record.update(http_status=status, duration_ms=round((time.monotonic() - clock) * 1000))
            if status != 200:
                record.update(error=ERRORS[status], error_detail=detail)
            write_once(record)
            return status, body

        def refuse(status: int, detail: str) -> tuple[int, bytes]:
            return finish(status, f"{MESSAGES[status]}: {detail}\n".encode(), detail)

        token_text = headers.get(TOKEN_HEADER.lower())
        tokens = _positive_int(token_text)
        record["requested_output_tokens"] = tokens
        length = _positive_int(headers.get("content-length"), allow_zero=True)
        if headers.get("transfer-encoding"):
            return refuse(400, "a Content-Length body is required (no chunked encoding)")
        if length is None:
            return refuse(400, "Content-Length is missing or invalid")
        record["prompt_bytes"] = length
        if length > self.model.max_prompt_bytes:
            _drain(read_body, min(length, DRAIN_LIMIT))  # so the client reads our answer
            return refuse(400, f"prompt of {length} bytes exceeds max_prompt_bytes "
                               f"{self.model.max_prompt_bytes}")
        raw: bytes = read_body(length)
        record.update(prompt_bytes=len(raw), prompt_sha256=_sha(raw))
        if len(raw) != length:
            return refuse(400, "the body is shorter than its Content-Length")
        try:
            prompt = raw.decode("utf-8")
        except UnicodeDecodeError:
            return refuse(400, "the prompt is not UTF-8")
        record["prompt"] = prompt
        if not prompt:
            return refuse(400, "the prompt is empty")
        if token_text is None:
            return refuse(400, f"header {TOKEN_HEADER} is missing")
        if tokens is None or tokens < 1:
            return refuse(400, f"header {TOKEN_HEADER} is not a positive integer")
        tokens = min(tokens, self.model.max_output_tokens)  # clamped, as the original does
        record["granted_output_tokens"] = tokens

        def checkpoint(progress: Any, outstanding: Decimal) -> None:
            pending = dict(record, phase="pending", error="interrupted",
                           attempts=list(progress.attempts),
                           reserved_usd=usd_text(progress.reserved),
                           accounted_usd=usd_text(progress.accounted + outstanding))
            write_once(pending)

        result = run_request(self.provider, prompt=prompt, prompt_bytes=len(raw),
                             max_tokens=tokens, ledger=self.ledger,
                             timeout_seconds=self.model.request_timeout_seconds,
                             checkpoint=checkpoint, offline=self.offline,
                             on_retry=lambda event: report(
                                 dict(event, event="retry", request_index=self.index)))
        record.update(attempts=result.attempts, reserved_usd=usd_text(result.reserved),
                      accounted_usd=usd_text(result.accounted),
                      usage_exceeds_request=result.usage_exceeds_request)
        if result.completion is not None:
            text = result.completion.text.encode("utf-8")
            usage = result.completion.usage
            completion = result.completion
            record.update(response=completion.text, response_bytes=len(text),
                          response_sha256=_sha(text),
                          usage=usage.as_record() if usage else None,
                          stop_reason=completion.stop_reason,
                          provider_response_status=completion.provider_status,
                          truncated=completion.truncated)
            if completion.truncated:
                self.reply_headers = {TRUNCATED_HEADER: "true"}
            return finish(200, text)
        if result.budget_refused:  # amounts stay in the audit: prices are not the organism's
            worst = worst_case_usd(self.ledger.price, len(raw), tokens)
            detail = (f"the worst case of {usd_text(worst)} USD does not fit the "
                      f"{usd_text(self.ledger.available)} USD left")
            record.update(http_status=402, error=ERRORS[402], error_detail=detail,
                          duration_ms=round((time.monotonic() - clock) * 1000))
            write_once(record)
            return 402, BUDGET_BODY
        failure = result.failure
        assert failure is not None
        record["usage"] = failure.usage.as_record() if failure.usage else None
        return finish(502, b"model unavailable\n", f"{failure.reason}: {failure.detail}")


def report(event: dict[str, Any]) -> None:
    """One line to the parent on stdout (non-blocking: dropped if the pipe is full)."""
    line = (json.dumps(event, ensure_ascii=False) + "\n").encode("utf-8")
    with contextlib.suppress(OSError):  # a full pipe or the parent gone: the audit has it all
        os.write(1, line)  # a pipe write of < PIPE_BUF bytes is whole or not at all


def _drain(read_body: Any, length: int) -> None:
    while length > 0:
        chunk = read_body(min(length, 1 << 16))
        if not chunk:
            return
        length -= len(chunk)


def _positive_int(text: str | None, *, allow_zero: bool = False) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        return None
    value = int(text)
    return value if value > 0 or allow_zero else None


class _Server(socketserver.UnixStreamServer):
    service: Service


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ouro-broker"
    sys_version = ""
    server: _Server

    def address_string(self) -> str:
        return "organism"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the audit is the log

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def _discard_body(self) -> None:
        """Read an unwanted body (bounded) so the client gets our answer, not a broken pipe."""
        length = _positive_int(self.headers.get("content-length"), allow_zero=True)
        _drain(self.rfile.read, min(length or 0, DRAIN_LIMIT))

    def do_POST(self) -> None:
        if self.path != "/generate":
            self._discard_body()
            self._reply(404, b"not found: POST /generate is the only operation\n")
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        try:
            status, body = self.server.service.serve(headers, self.rfile.read)
        except OSError:
            raise  # the organism hung up or stalled; nothing to answer
        except Exception as exc:  # a broker bug must not take the generation's audit with it
            sys.stderr.write(f"broker: internal error: {type(exc).__name__}: {exc}\n")
            with contextlib.suppress(Exception):
                self.server.service.fail_in_flight(exc)
            status, body = 502, b"model unavailable\n"
            self.server.service.reply_headers = {}
        self._reply(status, body, self.server.service.reply_headers if status == 200 else None)

    def do_GET(self) -> None:
        self._discard_body()
        self._reply(405, b"method not allowed: POST /generate\n")

    do_PUT = do_DELETE = do_PATCH = do_GET


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _read_line_fd(fd: int) -> bytes:
    """The parent's configuration: one line, after which the parent writes nothing (its
    pipe then only tells, by its end, that the parent is gone). Read in blocks, not byte
    by byte (a configuration is ~7 KB: as many system calls, ~5 ms of every broker's
    CPU); anything after the line is returned with it, and is no JSON."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        data += chunk
    return data


def main() -> int:
    """The broker process: config (with the key) from stdin, then serve until told to stop."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core dump will ever hold the key
    line = _read_line_fd(0)
    try:
        config = json.loads(line)
        service = Service(config)
        kernel_dir = Path(config["kernel_dir"])
        os.chdir(kernel_dir)  # bind by relative name: no AF_UNIX path-length limit
        _Handler.timeout = service.model.request_timeout_seconds  # a stalled client
        server = _Server(SOCKET_FILE, _Handler)
        server.service = service
        manifest = capabilities(config["constraints"], config["kernel_view"])
        _write_atomic(kernel_dir / CAPABILITIES_FILE,
                      (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode())
    except Exception as exc:  # reported to the parent, which raises
        sys.stdout.write(f"error: {type(exc).__name__}: {exc}\n")
        sys.stdout.flush()
        return 1
    del config, line

    def stop(*_: Any) -> None:
        # The parent may both close stdin (the watcher then signals) and terminate: a
        # second SIGTERM during shutdown, after Python reset its handlers, would kill
        # the broker by signal instead of letting it close its audit and exit 0.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)

    def watch_parent() -> None:  # end of file on stdin: the parent is gone
        while os.read(0, 4096):  # the raw fd: a buffered reader would block shutdown
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_parent, daemon=True).start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.set_blocking(1, False)  # from here on: report lines only, never waited for
    try:
        server.serve_forever()
    finally:
        server.server_close()
        service.provider.close()
        service.audit.close()
    return 0


# Optional modules that httpx and httpcore import whenever they are installed, and that
# the broker never uses: httpx's command-line client (click, rich) and httpcore's async
# back-ends. Made unimportable, they cost nothing: ~230 ms of CPU per generation less.
UNUSED_MODULES = ("httpx._main", "trio", "anyio")

if __name__ == "__main__":
    for _name in UNUSED_MODULES:
        sys.modules.setdefault(_name, None)  # type: ignore[arg-type]
    sys.exit(main())

