"""The notification channels are independent (issue 36, item 10): with both `--notify`
and `--notify-command`, a webhook on 127.0.0.1 that answers 500, or where nothing
listens, never keeps the command from running (each event, in order, at once)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from reconciler.engine.controller.notify import Notifier, NotifySettings
from tests.controller.harness import Hook


def _nothing_listens() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"  # closed: the connection is refused


@pytest.mark.parametrize("webhook", ["answers-500", "not-listening"])
def test_a_failing_webhook_never_keeps_the_command_from_running(tmp_path: Path,
                                                                 webhook: str) -> None:
    hook = Hook(status=500) if webhook == "answers-500" else None
    url = hook.url if hook is not None else _nothing_listens()
    received = tmp_path / "received.jsonl"
    notes: list[str] = []
    notifier = Notifier(NotifySettings(url=url, command=f"cat >> {received}", attempts=3,
                                       wait_max=2.0), notes.append)
    notifier.start()
    try:
        for number in range(3):
            notifier.send("bad-commit", f"event {number}", commit=str(number))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
                not received.exists() or len(received.read_text().splitlines()) < 3):
            time.sleep(0.05)
        sent = [json.loads(line) for line in received.read_text().splitlines()] \
            if received.exists() else []
        assert [item["text"] for item in sent] == ["event 0", "event 1", "event 2"], notes
    finally:
        notifier.close(timeout=30)
        if hook is not None:
            hook.close()
    if hook is not None:
        assert hook.attempts >= 3  # the webhook was tried all the same, and given up
    assert any("by its webhook" in note and "given up" in note for note in notes), notes
