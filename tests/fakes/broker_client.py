"""Talk to a model broker's Unix socket the way an organism would, plus broker fixtures.

``post(socket_path, body, tokens=...)`` returns ``(status, body)``;
``start_broker(tmp_path, model, ...)`` starts a real broker with short paths.
"""

from __future__ import annotations

import http.client
import socket
from pathlib import Path
from typing import Any

from reconciler.kernel.base.config import Ceilings, ModelConfig, constraints_manifest
from reconciler.kernel.broker.door import Broker


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("kernel", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self.unix_path))
        self.sock = sock


def post(socket_path: Path, body: bytes | str, *, tokens: int | str | None = 100,
         path: str = "/generate", method: str = "POST",
         timeout: float = 60.0) -> tuple[int, bytes]:
    status, data, _ = exchange(socket_path, body, tokens=tokens, path=path, method=method,
                               timeout=timeout)
    return status, data


def exchange(socket_path: Path, body: bytes | str, *, tokens: int | str | None = 100,
             path: str = "/generate", method: str = "POST",
             timeout: float = 60.0) -> tuple[int, bytes, dict[str, str]]:
    """``post``, also returning the reply's headers (lower-case names)."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    headers = {"Content-Type": "text/plain; charset=utf-8"}
    if tokens is not None:
        headers["X-Ouroboros-Max-Output-Tokens"] = str(tokens)
    connection = _UnixConnection(socket_path, timeout)
    try:
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        return (response.status, response.read(),
                {key.lower(): value for key, value in response.getheaders()})
    finally:
        connection.close()


def start_broker(root: Path, model: ModelConfig, *, api_key: str | None = None,
                 generation: int = 1, replay_cursor: int = 0, **kwargs: Any) -> Broker:
    return Broker.start(
        kernel_dir=root / "kernel", private_dir=root / "private", model=model,
        constraints=constraints_manifest(Ceilings(), model), api_key=api_key,
        generation=generation, replay_cursor=replay_cursor, **kwargs,
    )
