"""The model broker: the only door from a generation to a model. Trusted harness.

One broker process per generation, outside the sandbox, forked by the process's broker
fork server (physics release 5: ``forker``; else started afresh). It alone holds the
API key, which reaches it through its stdin pipe (never argv, environment or a file)
after it was forked; its environment is only PATH, LANG, and HOME/TMPDIR inside the
private runtime dir. It serves HTTP/1.1 on ``<kernel_dir>/model.sock`` (one request at a
time), writes ``<kernel_dir>/capabilities.json`` beside it, keeps the
generation's spending ledger, and appends one audit record per request to
``<private_dir>/audit.jsonl`` (flushed and synced; a request in flight is on
record as ``pending`` with its worst case, so a crash loses no spend).

    POST /generate   body: raw UTF-8 prompt; header X-Ouroboros-Max-Output-Tokens: N
      200 text | 400 invalid request | 402 budget exhausted | 502 model unavailable
      429 the generation's ceilings on model requests or audited bytes are reached: the
          provider is not asked, and the request is only counted (``refused.json``)
      a 200 whose reply was cut off (the output-token limit) carries
      X-Ouroboros-Truncated: true

A request for more output tokens than the per-request maximum is clamped to it
(the original instrument's rule), not refused. After ``ready`` the process
reports to its parent on its stdout, one JSON object a line (``{"event":
"retry", ...}`` before each retry's wait): ``Broker.start(on_event=...)`` hears
them; lines a slow parent cannot take are dropped, never waited for.

The broker exits when told to (SIGTERM) or when its parent goes away (its
stdin reaches end of file).

This module is the parent's side (checking a configuration, starting the
process and handing it the key, stopping it, reading its audit) and the wire
they share (the manifest, file names, the configuration line);
``process`` is the child's side (``python -m
reconciler.kernel.broker.process``: serving, ledger, provider calls).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from ..base import registry
from ..base.config import (
    CAPABILITIES_SCHEMA,
    JOURNAL_FILE,
    PROVIDERS,
    ModelConfig,
    Price,
)
from ..base.errors import ProviderConfigError, RecoveryError, TransientError
from ..base.formats import calls_spend
from ..base.launch import module_command
from . import forker

__all__ = [
    "AUDIT_FILE",
    "CAPABILITIES_FILE",
    "SOCKET_FILE",
    "Broker",
    "BrokerReport",
    "capabilities",
    "check_config",
    "read_refused",
]

SOCKET_FILE = "model.sock"
CAPABILITIES_FILE = "capabilities.json"
AUDIT_FILE = "audit.jsonl"
LOG_FILE = "broker.log"
TOKEN_HEADER = "X-Ouroboros-Max-Output-Tokens"
TRUNCATED_HEADER = "X-Ouroboros-Truncated"  # "true" on a 200 whose reply was cut off
BUDGET_BODY = b"generation budget exhausted\n"  # the original broker's 402 body, word for word
START_TIMEOUT_SECONDS = 30.0
STOP_GRACE_SECONDS = 5.0
KEYED = tuple(sorted(registry.KEYED_PROVIDERS))
HTTP_PROVIDERS = registry.HTTP_PROVIDERS
# The child's side, named from this package's own name: the kernel runs under any package
# name (``reconciler.kernel`` here, ``ouro_kernel_<fingerprint>`` from the kernel store).
PROCESS_MODULE = f"{__package__}.process"
# The folder the package's top level is in: the child loads this copy's package from there
# (``base.launch``), nothing else of that folder, and runs in its private folder.
PACKAGE_ROOT = Path(__file__).resolve().parents[(__package__ or "").count(".") + 1]

MESSAGES = {400: "invalid request", 402: "generation spending budget exhausted",
            502: "model unavailable"}
# Disclosed (and answered) only under constraints that name the model ceilings, so the
# original instrument's manifest is reproduced exactly from its own constraints.
CEILING_STATUS, CEILING_MESSAGE = 429, "model request ceiling reached"
REFUSED_FILE = "refused.json"  # beside the audit: how many requests the ceilings refused


def _errors(constraints: dict[str, Any]) -> dict[str, str]:
    errors = {code: text for code, text in MESSAGES.items()}
    model = constraints.get("model")
    if isinstance(model, dict) and "max_requests" in model:
        errors[CEILING_STATUS] = CEILING_MESSAGE
    return {str(code): errors[code] for code in sorted(errors)}


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
                # byte for byte the original's; TRUNCATED_HEADER is documented in
                # docs/contract.md and used by the seed organism
                "success": {"status": 200, "body": "raw UTF-8 generated text"},
                "errors": _errors(constraints),
            },
            {"name": "journal", "kind": "read-only-file", "path": f"{kernel_view}/{JOURNAL_FILE}"},
        ],
        "constraints": constraints,
    }


# ================================================================ the parent's side


@dataclass(frozen=True)
class BrokerReport:
    model_calls: list[dict[str, Any]]  # docs/lineage-contract.md model_calls records
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
    if model.provider in registry.BASE_URL_REQUIRED and not model.base_url:
        raise ProviderConfigError(f"kernel: provider {model.provider} needs a base_url")
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


def model_json(model: ModelConfig) -> dict[str, Any]:
    """The model as the configuration line carries it to the process (``model_from_json``)."""
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
        "store": model.store,
    }


def model_from_json(value: dict[str, Any]) -> ModelConfig:
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
        store=value.get("store") is True,
    )


class Broker:
    """A running broker process; start it with ``Broker.start``."""

    def __init__(self, process: subprocess.Popen[bytes] | forker.Forked, kernel_dir: Path,
                 private_dir: Path) -> None:
        self.process = process
        self.kernel_dir = kernel_dir
        self.private_dir = private_dir
        self.socket_path = kernel_dir / SOCKET_FILE
        self._events: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, *, kernel_dir: Path, private_dir: Path, model: ModelConfig,
              constraints: dict[str, Any], api_key: str | None, generation: int,
              replay_cursor: int = 0, kernel_view: str = "/kernel",
              start_timeout: float = START_TIMEOUT_SECONDS,
              on_event: Callable[[dict[str, Any]], None] | None = None) -> Broker:
        """Start the broker; returns once the socket accepts and the manifest is written.

        ``kernel_view`` is where the organism sees ``kernel_dir`` (``/kernel`` in the
        sandbox; tests running an organism outside one pass ``kernel_dir`` itself).
        ``on_event(event)`` hears the process's reports (a retry and its wait), on a
        thread of its own. Raises ``ProviderConfigError`` before anything starts,
        ``RecoveryError`` if ``private_dir`` already holds an audit,
        ``TransientError`` if the process fails to come up.
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
        environment = {**_ENVIRONMENT, "HOME": str(private_dir / "home"),
                       "TMPDIR": str(private_dir / "tmp")}
        try:
            process = _start_process(environment, private_dir, log)
        except OSError as exc:
            raise TransientError(f"kernel: cannot start the model broker: {exc}") from exc
        finally:
            log.close()
        broker = cls(process, kernel_dir, private_dir)
        config = {
            "api_key": api_key, "model": model_json(model), "constraints": constraints,
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
        broker._events = threading.Thread(target=_relay_events, args=(process.stdout, on_event),
                                          name="ouro-broker-events", daemon=True)
        broker._events.start()  # always drained, so the process never blocks on its stdout
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
        return BrokerReport(calls, calls_spend(calls))

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
        if self._events is not None:  # it owns stdout: end of file comes with the process's end
            self._events.join(STOP_GRACE_SECONDS)
        elif self.process.stdout is not None:
            self.process.stdout.close()
        self.socket_path.unlink(missing_ok=True)

    @staticmethod
    def read_audit(private_dir: Path) -> list[dict[str, Any]]:
        """The model_calls of a broker, finished or crashed, in request order.

        A request still pending when the broker died is reported with
        ``http_status`` null, error ``interrupted`` and its worst case accounted.
        """
        by_index: dict[int, dict[str, Any]] = {}
        try:
            handle = open(Path(private_dir) / AUDIT_FILE, encoding="utf-8", errors="replace")  # noqa: SIM115
        except FileNotFoundError:
            return []
        with handle:  # streamed: one line at a time, never the whole file
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line torn by a crash
                if isinstance(record, dict) and isinstance(record.get("request_index"), int):
                    # a later record of a request completes the earlier (its prompt is
                    # stored once, in the first)
                    by_index.setdefault(record["request_index"], {}).update(record)
        calls = []
        for index in sorted(by_index):  # (bounded by the model_requests/_audit ceilings)
            record = dict(by_index[index])
            record.pop("phase", None)
            calls.append(record)
        return calls


# A broker's environment beside its own HOME and TMPDIR (inside its private folder).
_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def warm() -> None:
    """Start this process's broker fork server ahead of the first broker (``forker.start``),
    when brokers are forked here; a server that cannot start now is started (or done
    without) when the first broker is asked for, as before."""
    if forker.ENABLED:
        with contextlib.suppress(OSError):
            forker.start(PACKAGE_ROOT, dict(_ENVIRONMENT), no_bytecode=sys.dont_write_bytecode)


def _start_process(environment: dict[str, str], private_dir: Path,
                   log: IO[bytes]) -> subprocess.Popen[bytes] | forker.Forked:
    """The broker's process: forked by this process's broker fork server (physics
    release 5; ``forker``), else a fresh interpreter as before -- isolated (-I), from this
    kernel's own tree only, in its private folder; -B passed on: a stored (read-only,
    verified) kernel gets no byte code added."""
    if forker.ENABLED:
        with contextlib.suppress(OSError):
            return forker.spawn(PACKAGE_ROOT, environment, private_dir, log.fileno(),
                                no_bytecode=sys.dont_write_bytecode)
    return subprocess.Popen(
        module_command(PACKAGE_ROOT, PROCESS_MODULE, no_bytecode=sys.dont_write_bytecode),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
        env=environment, cwd=private_dir, close_fds=True, start_new_session=True,
    )


def read_refused(private_dir: Path) -> int:
    """How many requests the generation's ceilings refused (429), 0 if none or unreadable."""
    try:
        value = json.loads((Path(private_dir) / REFUSED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    count = value.get("refused_requests") if isinstance(value, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def _read_line(stream: IO[bytes], timeout: float) -> bytes:
    """One line from a pipe, or TimeoutError.

    Waits with poll(2), never select(2): an apply running a hundred lineages in one
    process holds descriptors numbered past select's 1,024 (physics release 3).
    """
    deadline = time.monotonic() + timeout
    data = b""
    fd = stream.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer within {timeout:.0f}s")
        if poller.poll(max(1, math.ceil(left * 1000))):
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    return data


def _relay_events(stream: IO[bytes], on_event: Callable[[dict[str, Any]], None] | None) -> None:
    """Read the process's report lines until it ends; hand each JSON object to ``on_event``."""
    try:
        for line in iter(stream.readline, b""):
            if on_event is None:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                with contextlib.suppress(Exception):  # a listener's bug is not the broker's
                    on_event(event)
    except (OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError):
            stream.close()


def _log_tail(private_dir: Path) -> str:
    try:
        lines = (private_dir / LOG_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "no log"
    return " | ".join(lines[-5:]) or "it exited without a word"


