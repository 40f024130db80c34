"""The model broker: the only door from a generation to a model. Trusted harness.

One broker process per generation, outside the sandbox. It alone holds the API
key, which reaches it through its stdin pipe (never argv, environment or a
file); its environment is only PATH, LANG, and HOME/TMPDIR inside the private
runtime dir. It serves HTTP/1.1 on ``<kernel_dir>/model.sock`` (one request at a
time), writes ``<kernel_dir>/capabilities.json`` beside it, keeps the
generation's spending ledger, and appends one audit record per request to
``<private_dir>/audit.jsonl`` (flushed and synced; a request in flight is on
record as ``pending`` with its worst case, so a crash loses no spend).

    POST /generate   body: raw UTF-8 prompt; header X-Ouroboros-Max-Output-Tokens: N
      200 text | 400 invalid request | 402 budget exhausted | 502 model unavailable

The broker exits when told to (SIGTERM) or when its parent goes away (its
stdin reaches end of file).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import resource
import select
import signal
import socketserver
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import IO, Any

from .config import (
    CAPABILITIES_SCHEMA,
    JOURNAL_FILE,
    MODEL_CALL_SCHEMA,
    PROVIDERS,
    ModelConfig,
    Price,
)
from .errors import ProviderConfigError, RecoveryError, TransientError

__all__ = [
    "AUDIT_FILE",
    "CAPABILITIES_FILE",
    "SOCKET_FILE",
    "Broker",
    "BrokerReport",
    "capabilities",
    "check_config",
]

SOCKET_FILE = "model.sock"
CAPABILITIES_FILE = "capabilities.json"
AUDIT_FILE = "audit.jsonl"
LOG_FILE = "broker.log"
TOKEN_HEADER = "X-Ouroboros-Max-Output-Tokens"
START_TIMEOUT_SECONDS = 30.0
STOP_GRACE_SECONDS = 5.0
MIN_REDACTED_KEY = 16
DRAIN_LIMIT = 16 << 20  # an oversized body is read and dropped up to this much
KEYED = ("anthropic", "openai")
HTTP_PROVIDERS = ("anthropic", "openai", "openai-compatible")

ERRORS = {400: "invalid_request", 402: "budget_exhausted", 502: "model_unavailable"}
MESSAGES = {400: "invalid request", 402: "generation spending budget exhausted",
            502: "model unavailable"}


def capabilities(constraints: dict[str, Any], kernel_view: str = "/kernel") -> dict[str, Any]:
    """The manifest the organism reads, paths as seen from inside the sandbox."""
    return {
        "schema": CAPABILITIES_SCHEMA,
        "capabilities": [
            {
                "name": "generate",
                "transport": "http-over-unix",
                "socket": f"{kernel_view}/{SOCKET_FILE}",
                "method": "POST",
                "path": "/generate",
                "request": {
                    "body": "raw UTF-8 prompt",
                    "headers": {
                        "Content-Type": "text/plain; charset=utf-8",
                        TOKEN_HEADER: "positive integer",
                    },
                },
                "success": {"status": 200, "body": "raw UTF-8 generated text"},
                "errors": {str(code): text for code, text in MESSAGES.items()},
            },
            {"name": "journal", "kind": "read-only-file", "path": f"{kernel_view}/{JOURNAL_FILE}"},
        ],
        "constraints": constraints,
    }


# ================================================================ the parent's side


@dataclass(frozen=True)
class BrokerReport:
    model_calls: list[dict[str, Any]]  # CONTRACT.md model_calls records
    accounted_usd: Decimal


def check_config(model: ModelConfig, api_key: str | None, generation: int,
                 replay_cursor: int) -> None:
    """``ProviderConfigError`` unless a broker could serve this model (``start`` checks first)."""
    if model.provider not in PROVIDERS:
        raise ProviderConfigError(
            f"kernel: unknown model provider {model.provider!r}; known: {', '.join(PROVIDERS)}")
    if model.provider in KEYED and not api_key:
        variable = model.api_key_env or "its API key variable"
        raise ProviderConfigError(
            f"kernel: provider {model.provider} needs an API key; set {variable}")
    if api_key is not None and (not api_key.isprintable() or api_key != api_key.strip()):
        raise ProviderConfigError("kernel: the API key contains whitespace or control characters")
    if model.provider == "openai-compatible" and not model.base_url:
        raise ProviderConfigError("kernel: provider openai-compatible needs a base_url")
    if model.base_url and model.provider in HTTP_PROVIDERS and not model.base_url.startswith(
            ("http://", "https://")):
        raise ProviderConfigError(f"kernel: base_url {model.base_url!r} is not an http(s) URL")
    if model.provider == "replay" and (model.replay_dir is None or not model.replay_dir.is_dir()):
        raise ProviderConfigError(
            f"kernel: provider replay needs an existing replay folder, not {model.replay_dir}")
    if model.budget_usd < 0 or model.price.input_usd_per_mtok < 0 \
            or model.price.output_usd_per_mtok < 0:
        raise ProviderConfigError("kernel: budget and prices must not be negative")
    if model.max_output_tokens < 1 or model.max_prompt_bytes < 1 \
            or model.request_timeout_seconds < 1:
        raise ProviderConfigError("kernel: model limits must be positive")
    if generation < 1 or replay_cursor < 0:
        raise ProviderConfigError("kernel: generation must be >= 1 and replay_cursor >= 0")


_check_config = check_config  # the name kernel.generation imported first


def _model_json(model: ModelConfig) -> dict[str, Any]:
    return {
        "provider": model.provider, "name": model.name,
        "price": {"input_usd_per_mtok": str(model.price.input_usd_per_mtok),
                  "output_usd_per_mtok": str(model.price.output_usd_per_mtok)},
        "base_url": model.base_url, "api_key_env": model.api_key_env,
        "replay_dir": str(model.replay_dir) if model.replay_dir else None,
        "max_output_tokens": model.max_output_tokens,
        "max_prompt_bytes": model.max_prompt_bytes,
        "request_timeout_seconds": model.request_timeout_seconds,
        "budget_usd": str(model.budget_usd),
    }


def _model_from_json(value: dict[str, Any]) -> ModelConfig:
    price = value["price"]
    return ModelConfig(
        provider=value["provider"], name=value["name"],
        price=Price(Decimal(price["input_usd_per_mtok"]), Decimal(price["output_usd_per_mtok"])),
        base_url=value["base_url"], api_key_env=value["api_key_env"],
        replay_dir=Path(value["replay_dir"]) if value["replay_dir"] else None,
        max_output_tokens=int(value["max_output_tokens"]),
        max_prompt_bytes=int(value["max_prompt_bytes"]),
        request_timeout_seconds=int(value["request_timeout_seconds"]),
        budget_usd=Decimal(value["budget_usd"]),
    )


class Broker:
    """A running broker process; start it with ``Broker.start``."""

    def __init__(self, process: subprocess.Popen[bytes], kernel_dir: Path,
                 private_dir: Path) -> None:
        self.process = process
        self.kernel_dir = kernel_dir
        self.private_dir = private_dir
        self.socket_path = kernel_dir / SOCKET_FILE

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, *, kernel_dir: Path, private_dir: Path, model: ModelConfig,
              constraints: dict[str, Any], api_key: str | None, generation: int,
              replay_cursor: int = 0, kernel_view: str = "/kernel",
              start_timeout: float = START_TIMEOUT_SECONDS) -> Broker:
        """Start the broker; returns once the socket accepts and the manifest is written.

        ``kernel_view`` is where the organism sees ``kernel_dir`` (``/kernel`` in the
        sandbox; tests running an organism outside one pass ``kernel_dir`` itself).
        Raises ``ProviderConfigError`` before anything starts, ``RecoveryError`` if
        ``private_dir`` already holds an audit, ``TransientError`` if the process
        fails to come up.
        """
        check_config(model, api_key, generation, replay_cursor)
        kernel_dir = Path(os.path.abspath(kernel_dir))
        private_dir = Path(os.path.abspath(private_dir))
        if (private_dir / AUDIT_FILE).exists():  # another generation's spend: never mix or lose it
            raise RecoveryError(
                f"kernel: {private_dir / AUDIT_FILE} already exists; every broker needs a fresh "
                "private dir (recover the earlier generation's spend from it first)")
        try:
            kernel_dir.mkdir(parents=True, exist_ok=True)
            private_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(private_dir, 0o700)
            for sub in ("home", "tmp"):
                (private_dir / sub).mkdir(exist_ok=True, mode=0o700)
            for stale in (kernel_dir / SOCKET_FILE, kernel_dir / CAPABILITIES_FILE):
                stale.unlink(missing_ok=True)
            log = open(private_dir / LOG_FILE, "ab")  # noqa: SIM115 (handed to the child)
        except OSError as exc:
            raise TransientError(f"kernel: cannot prepare the broker's directories: {exc}") from exc
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(private_dir / "home"),
            "TMPDIR": str(private_dir / "tmp"),
            "LANG": "C.UTF-8",
        }
        package_root = Path(__file__).resolve().parents[2]
        try:
            process = subprocess.Popen(
                [sys.executable, "-E", "-m", "reconciler.kernel.broker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                env=environment, cwd=package_root, close_fds=True, start_new_session=True,
            )
        except OSError as exc:
            raise TransientError(f"kernel: cannot start the model broker: {exc}") from exc
        finally:
            log.close()
        broker = cls(process, kernel_dir, private_dir)
        config = {
            "api_key": api_key, "model": _model_json(model), "constraints": constraints,
            "generation": generation, "replay_cursor": replay_cursor,
            "kernel_dir": str(kernel_dir), "private_dir": str(private_dir),
            "kernel_view": kernel_view,
        }
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(config).encode("utf-8") + b"\n")
            process.stdin.flush()  # stdin stays open: its end of file tells the broker we died
            line = _read_line(process.stdout, start_timeout)
        except (OSError, TimeoutError) as exc:
            broker.kill()
            raise TransientError(
                f"kernel: the model broker did not start: {exc}; see {private_dir / LOG_FILE}"
            ) from exc
        if line.strip() != b"ready":
            broker.kill()
            message = line.decode("utf-8", "replace").strip() or _log_tail(private_dir)
            raise TransientError(f"kernel: the model broker did not start: {message}")
        return broker

    def stop(self) -> BrokerReport:
        """Terminate the broker (gracefully, then by force); return every audit record."""
        if self.process.poll() is None:
            self._close_stdin()
            self.process.terminate()
            try:
                self.process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.kill()
        self._cleanup()
        calls = self.read_audit(self.private_dir)
        return BrokerReport(calls, _total(calls))

    def kill(self) -> None:
        """SIGKILL the broker now (its audit so far stays readable)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._cleanup()

    def _close_stdin(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(OSError):
                self.process.stdin.close()

    def _cleanup(self) -> None:
        self._close_stdin()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.socket_path.unlink(missing_ok=True)

    @staticmethod
    def read_audit(private_dir: Path) -> list[dict[str, Any]]:
        """The model_calls of a broker, finished or crashed, in request order.

        A request still pending when the broker died is reported with
        ``http_status`` null, error ``interrupted`` and its worst case accounted.
        """
        try:
            text = (Path(private_dir) / AUDIT_FILE).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        by_index: dict[int, dict[str, Any]] = {}
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line torn by a crash
            if isinstance(record, dict) and isinstance(record.get("request_index"), int):
                by_index[record["request_index"]] = record
        calls = []
        for index in sorted(by_index):
            record = dict(by_index[index])
            record.pop("phase", None)
            calls.append(record)
        return calls


def _read_line(stream: IO[bytes], timeout: float) -> bytes:
    """One line from a pipe, or TimeoutError."""
    deadline = time.monotonic() + timeout
    data = b""
    fd = stream.fileno()
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer within {timeout:.0f}s")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    return data


def _log_tail(private_dir: Path) -> str:
    try:
        lines = (private_dir / LOG_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "no log"
    return " | ".join(lines[-5:]) or "it exited without a word"


def _total(calls: list[dict[str, Any]]) -> Decimal:
    total = Decimal(0)
    for call in calls:
        try:
            total += Decimal(str(call.get("accounted_usd") or "0"))
        except InvalidOperation:
            continue
    return total


# ================================================================ the broker process


def _utc_now() -> str:
    return datetime.now(UTC).isoformat()


def _sha(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


class Service:
    """The broker's state: provider, ledger, audit file, request counter."""

    def __init__(self, config: dict[str, Any]) -> None:
        from .ledger import Ledger
        from .providers import make_provider

        self.model = _model_from_json(config["model"])
        self.api_key: str | None = config["api_key"]
        self.generation = int(config["generation"])
        self.provider = make_provider(self.model, self.api_key, int(config["replay_cursor"]))
        self.ledger = Ledger(self.model.budget_usd, self.model.price)
        self.offline = self.model.provider in ("replay", "echo")
        self.index = 0
        audit_path = Path(config["private_dir"]) / AUDIT_FILE
        self.audit = open(audit_path, "a", encoding="utf-8")  # noqa: SIM115 (lives as long as we do)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False)
        # Provider errors are redacted where they arise; this second net is only safe for a
        # key too long to collide with the record's own text.
        if self.api_key and len(self.api_key) >= MIN_REDACTED_KEY:
            line = line.replace(self.api_key, "[redacted]")
        self.audit.write(line + "\n")
        self.audit.flush()
        os.fsync(self.audit.fileno())

    def serve(self, headers: dict[str, str], read_body: Any) -> tuple[int, bytes]:
        """One /generate request: (status, body). Every request is audited."""
        from .ledger import usd_text, worst_case_usd
        from .providers import run_request

        self.index += 1
        clock = time.monotonic()
        record: dict[str, Any] = {
            "schema": MODEL_CALL_SCHEMA, "generation": self.generation,
            "request_index": self.index, "operation": "generate", "started_at": _utc_now(),
            "duration_ms": None, "requested_output_tokens": None, "granted_output_tokens": None,
            "prompt": None, "prompt_bytes": None, "prompt_sha256": None,
            "response": None, "response_bytes": None, "response_sha256": None,
            "http_status": None, "error": None, "error_detail": None, "usage": None,
            "reserved_usd": None, "accounted_usd": "0", "attempts": [],
        }

        def finish(status: int, body: bytes, detail: str | None = None) -> tuple[int, bytes]:
            record.update(http_status=status, duration_ms=round((time.monotonic() - clock) * 1000))
            if status != 200:
                record.update(error=ERRORS[status], error_detail=detail)
            self.write(record)
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
        if tokens > self.model.max_output_tokens:
            return refuse(400, f"{tokens} output tokens exceed max_output_tokens_per_request "
                               f"{self.model.max_output_tokens}")
        record["granted_output_tokens"] = tokens

        def checkpoint(progress: Any, outstanding: Decimal) -> None:
            pending = dict(record, phase="pending", error="interrupted",
                           attempts=list(progress.attempts),
                           reserved_usd=usd_text(progress.reserved),
                           accounted_usd=usd_text(progress.accounted + outstanding))
            self.write(pending)

        result = run_request(self.provider, prompt=prompt, prompt_bytes=len(raw),
                             max_tokens=tokens, ledger=self.ledger,
                             timeout_seconds=self.model.request_timeout_seconds,
                             checkpoint=checkpoint, offline=self.offline)
        record.update(attempts=result.attempts, reserved_usd=usd_text(result.reserved),
                      accounted_usd=usd_text(result.accounted))
        if result.completion is not None:
            text = result.completion.text.encode("utf-8")
            usage = result.completion.usage
            record.update(response=result.completion.text, response_bytes=len(text),
                          response_sha256=_sha(text),
                          usage=usage.as_record() if usage else None)
            return finish(200, text)
        if result.budget_refused:  # amounts stay in the audit: prices are not the organism's
            worst = worst_case_usd(self.ledger.price, len(raw), tokens)
            detail = (f"the worst case of {usd_text(worst)} USD does not fit the "
                      f"{usd_text(self.ledger.available)} USD left")
            record.update(http_status=402, error=ERRORS[402], error_detail=detail,
                          duration_ms=round((time.monotonic() - clock) * 1000))
            self.write(record)
            return 402, f"{MESSAGES[402]}\n".encode()
        failure = result.failure
        assert failure is not None
        record["usage"] = failure.usage.as_record() if failure.usage else None
        return finish(502, b"model unavailable\n", f"{failure.reason}: {failure.detail}")


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

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
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
            status, body = 502, b"model unavailable\n"
        self._reply(status, body)

    def do_GET(self) -> None:
        self._discard_body()
        self._reply(405, b"method not allowed: POST /generate\n")

    do_PUT = do_DELETE = do_PATCH = do_GET


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _read_line_fd(fd: int) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1)  # byte by byte: nothing after the line is consumed
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

