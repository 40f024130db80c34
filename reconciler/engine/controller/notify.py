"""Notifications of the controller's transitions: a webhook POST and/or a command.

Rule: delivery never runs on the reconcile path. ``Notifier.send`` only puts the event
on a queue; one thread delivers events in the order they were sent, each retried with
tenacity (a webhook that answers 5xx, refuses the connection or hangs past its timeout is
tried again, a few times, then given up with a note). A generation never waits for it.

The event is a JSON object with a plain ``text`` field (Slack- and Matrix-style incoming
hooks show it), ``event``, ``at`` and the event's own fields. The webhook's URL may name
environment variables (``$VAR`` or ``${VAR}``, e.g. a token in the URL), and
``OURO_NOTIFY_AUTHORIZATION``, when set, is sent as the ``Authorization`` header:
secrets come from the environment, never from specs. The command is run with the event
on its stdin, one line (``sh -c``; a nonzero exit is a failed delivery, retried).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import Retrying, stop_after_attempt, wait_exponential

from reconciler.engine.controller.conditions import now

__all__ = ["AUTHORIZATION_VARIABLE", "DeliveryError", "Notifier", "NotifySettings"]

AUTHORIZATION_VARIABLE = "OURO_NOTIFY_AUTHORIZATION"
EVENT_KIND = "ouro-controller-event"
_TIMEOUT = 10.0  # seconds for one webhook request
_COMMAND_TIMEOUT = 60.0


class DeliveryError(Exception):
    """One delivery failed (retried; given up after the last attempt)."""


@dataclass(frozen=True)
class NotifySettings:
    url: str | None = None  # may name $VARIABLES, expanded when sent
    command: str | None = None
    attempts: int = 5
    wait_max: float = 30.0  # seconds between attempts, at most
    timeout: float = _TIMEOUT


class Notifier:
    """A queue and the one thread that delivers it (``start``, ``send``, ``close``)."""

    def __init__(self, settings: NotifySettings, note: Callable[[str], None]) -> None:
        self.settings = settings
        self._note = note
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return bool(self.settings.url or self.settings.command)

    def start(self) -> None:
        if self.active and self._thread is None:
            self._thread = threading.Thread(target=self._deliver_all, name="notify",
                                            daemon=True)
            self._thread.start()

    def send(self, event: str, text: str, **fields: Any) -> None:
        """Queue one event (returns at once)."""
        if self.active:
            self._queue.put({"kind": EVENT_KIND, "event": event, "text": text, "at": now(),
                             **fields})

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued, waiting at most ``timeout`` seconds, then stop."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None

    def _deliver_all(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                for attempt in Retrying(stop=stop_after_attempt(self.settings.attempts),
                                        wait=wait_exponential(multiplier=0.5,
                                                              max=self.settings.wait_max),
                                        reraise=True):
                    with attempt:
                        self._deliver(event)
            except DeliveryError as error:
                self._note(f"ouro controller: notification {event['event']} not delivered "
                           f"after {self.settings.attempts} attempts ({error}); given up")
            except Exception as error:  # a bug here must not end the delivery thread
                self._note(f"ouro controller: notification {event['event']} failed "
                           f"({type(error).__name__}: {error})")

    def _deliver(self, event: dict[str, Any]) -> None:
        body = json.dumps(event, sort_keys=True, default=str).encode()
        if self.settings.url:
            self._post(body)
        if self.settings.command:
            self._run(body)

    def _post(self, body: bytes) -> None:
        url = os.path.expandvars(self.settings.url or "")
        headers = {"content-type": "application/json"}
        token = os.environ.get(AUTHORIZATION_VARIABLE)
        if token:
            headers["authorization"] = token
        try:
            reply = httpx.post(url, content=body, headers=headers, timeout=self.settings.timeout)
        except httpx.HTTPError as error:
            raise DeliveryError(f"webhook: {type(error).__name__}") from error
        if reply.status_code >= 300:
            raise DeliveryError(f"webhook answered HTTP {reply.status_code}")

    def _run(self, body: bytes) -> None:
        try:
            done = subprocess.run(["sh", "-c", self.settings.command or ""], input=body + b"\n",
                                  capture_output=True, timeout=_COMMAND_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise DeliveryError(f"command: {type(error).__name__}") from error
        if done.returncode != 0:
            raise DeliveryError(f"command exited {done.returncode}")
