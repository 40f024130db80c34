"""The viewer's server under a flood: bounded connections, bounded logs, bounded heavy work.

Rule: whoever can reach the port (any local process) must not be able to lock the
token holder out, fill the disk, or grow the viewer's memory without bound:

- ``GuardedH11`` (uvicorn's h11 protocol) holds at most ``MAX_CONNECTIONS`` open
  connections: a new one beyond that closes the oldest IDLE ones (no request in
  progress), so a flood of idle sockets cannot exhaust the descriptors (the accept
  loop never hits EMFILE) nor starve a client that sends a request; a connection
  that has not sent a whole request within ``REQUEST_SECONDS`` is closed;
- ``RateLimit`` lets ``LOG_BURST`` log records through per ``LOG_WINDOW_SECONDS``
  per logger (the first with its traceback), then one line saying how many were
  dropped: a flood writes kilobytes, not hundreds of megabytes;
- ``HEAVY`` admits ``HEAVY_AT_ONCE`` heavy pages (a generation, a raw view, a plot)
  at a time: each is bounded (``reconciler.viewer.pages``), so memory is
  bounded under concurrent requests; a request that waits more than
  ``HEAVY_WAIT_SECONDS`` is answered 503.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEAVY", "MAX_CONNECTIONS", "GuardedH11", "RateLimit", "limit_logs",
           "server_settings"]

MAX_CONNECTIONS = 256  # well below the usual 1024 descriptors; a browser opens 6
REQUEST_SECONDS = 10.0  # to send one whole request (headers) once connected
KEEP_ALIVE_SECONDS = 5
MAX_HEADER_BYTES = 16 * 1024  # a request line and headers (the token is 32 bytes)
LOG_BURST = 20
LOG_WINDOW_SECONDS = 10.0
HEAVY_AT_ONCE = 2
HEAVY_WAIT_SECONDS = 30.0
HEAVY = threading.BoundedSemaphore(HEAVY_AT_ONCE)


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol, with the open connections bounded (see the module rule)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.made_at = time.monotonic()
        self.request_timer = self.loop.call_later(REQUEST_SECONDS, self._no_request)
        if len(self.connections) > MAX_CONNECTIONS:
            self._shed()

    def connection_lost(self, exc: Exception | None) -> None:
        self.request_timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None:
            self.request_timer.cancel()  # a whole request came: keep-alive rules apply now

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _no_request(self) -> None:
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()

    def _shed(self) -> None:
        """Close the oldest idle connections until at most MAX_CONNECTIONS are open."""
        idle = sorted((c for c in self.connections
                       if isinstance(c, GuardedH11) and c is not self and c._idle()),
                      key=lambda c: c.made_at)
        for connection in idle[:len(self.connections) - MAX_CONNECTIONS]:
            connection.transport.close()
            self.connections.discard(connection)


class RateLimit(logging.Filter):
    """At most LOG_BURST records per window; then one line counting what was dropped."""

    def __init__(self, burst: int = LOG_BURST, window: float = LOG_WINDOW_SECONDS) -> None:
        super().__init__()
        self.burst, self.window = burst, window
        self.started, self.passed, self.dropped = time.monotonic(), 0, 0
        self._mutex = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        with self._mutex:
            now = time.monotonic()
            if now - self.started >= self.window:
                if self.dropped:
                    record.msg = (f"({self.dropped} log records dropped in the last "
                                  f"{self.window:.0f} s: too many) {record.msg}")
                self.started, self.passed, self.dropped = now, 0, 0
            if self.passed >= self.burst:
                self.dropped += 1
                return False
            if self.passed > 0:
                record.exc_info, record.exc_text = None, None  # one traceback per window
            self.passed += 1
            return True


def limit_logs(*names: str) -> None:
    """Rate-limit the loggers a server writes through (uvicorn's, asyncio's)."""
    for name in names or ("uvicorn", "uvicorn.error", "uvicorn.access", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RateLimit) for f in logger.filters):
            logger.addFilter(RateLimit())


def server_settings() -> dict[str, Any]:
    """uvicorn.Config's keywords for the viewer (``GuardedH11`` and its bounds)."""
    return {"http": GuardedH11, "limit_concurrency": MAX_CONNECTIONS + 16,
            "timeout_keep_alive": KEEP_ALIVE_SECONDS, "backlog": 128,
            "h11_max_incomplete_event_size": MAX_HEADER_BYTES}
