"""Notifications of the controller's transitions: a webhook POST and/or a command.

Rule: delivery never runs on the reconcile path. ``Notifier.send`` only puts the event
on a queue per channel (the webhook, the command: independent, so a failing one never
keeps the other from running); one thread per channel delivers its events in the order
they were sent, each retried with tenacity (a webhook that answers 5xx, refuses the
connection or hangs past its timeout is tried again, a few times, then given up with a
note). A generation never waits for it.

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
import time
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
    """A queue and a delivering thread per channel (``start``, ``send``, ``close``): the
    webhook and the command are independent, so one that fails, hangs or is given up
    never delays or keeps back the other."""

    def __init__(self, settings: NotifySettings, note: Callable[[str], None]) -> None:
        self.settings = settings
        self._note = note
        channels: list[tuple[str, Callable[[bytes], None]]] = []
        if settings.url:
            channels.append(("webhook", self._post))
        if settings.command:
            channels.append(("command", self._run))
        self._channels = channels
        self._queues: list[queue.Queue[dict[str, Any] | None]] = []
        self._threads: list[threading.Thread] = []

    @property
    def active(self) -> bool:
        return bool(self._channels)

    def start(self) -> None:
        if self._threads:
            return
        for name, deliver in self._channels:
            inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
            thread = threading.Thread(target=self._deliver_all, args=(name, deliver, inbox),
                                      name=f"notify-{name}", daemon=True)
            self._queues.append(inbox)
            self._threads.append(thread)
            thread.start()

    def send(self, event: str, text: str, **fields: Any) -> None:
        """Queue one event on every channel (returns at once)."""
        if not self.active:
            return
        item = {"kind": EVENT_KIND, "event": event, "text": text, "at": now(), **fields}
        for inbox in self._queues:
            inbox.put(item)

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued, waiting at most ``timeout`` seconds in all, then stop."""
        for inbox in self._queues:
            inbox.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._queues, self._threads = [], []

    def _deliver_all(self, channel: str, deliver: Callable[[bytes], None],
                     inbox: queue.Queue[dict[str, Any] | None]) -> None:
        while True:
            event = inbox.get()
            if event is None:
                return
            body = json.dumps(event, sort_keys=True, default=str).encode()
            try:
                for attempt in Retrying(stop=stop_after_attempt(self.settings.attempts),
                                        wait=wait_exponential(multiplier=0.5,
                                                              max=self.settings.wait_max),
                                        reraise=True):
                    with attempt:
                        deliver(body)
            except DeliveryError as error:
                self._note(f"ouro controller: notification {event['event']} not delivered "
                           f"by its {channel} after {self.settings.attempts} attempts "
                           f"({error}); given up")
            except Exception as error:  # a bug here must not end the delivery thread
                self._note(f"ouro controller: notification {event['event']} failed on its "
                           f"{channel} ({type(error).__name__}: {error})")

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
