"""A spec repository the test commits to, and `ouro controller` as a real process.

The spec repository is a bare repository (REPO) pushed to from a work clone with git
itself (tests may use git; ouro never does). The controller runs as a user runs it, a
process of its own on the test's state dir, polling every ``interval``; the test reads
what it wrote (``<state dir>/.controller/status.json``, ``events.jsonl``) and waits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.apply.helpers import REPO_ROOT, ouro_argv

Check = Callable[[], Any]


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    return done.stdout.strip()


def spec_text(name: str, generations: int, *, suspend: bool = False, extra: str = "",
              provider: str = "echo") -> str:
    lines = ["apiVersion: ouro/v1", "kind: Lineage", "metadata:", f"  name: {name}", "spec:",
             f"  generations: {generations}", "  model:", f"    provider: {provider}"]
    lines += [f"    {line}" for line in extra.splitlines() if line.strip()]
    lines += ["  ceilings:", "    wall: 60s", "    cpu: 30s", "    memory: 512MiB"]
    if suspend:
        lines.append("  suspend: true")
    return "\n".join(lines) + "\n"


class SpecRepo:
    """A bare repository and the clone the test edits and pushes from."""

    def __init__(self, root: Path) -> None:
        self.bare = root / "spec.git"
        self.work = root / "spec-work"
        git("init", "-q", "--bare", "-b", "main", str(self.bare), cwd=root)
        git("init", "-q", "-b", "main", str(self.work), cwd=root)
        (self.work / "specs").mkdir()

    def commit(self, message: str, files: dict[str, str | None]) -> str:
        """Write (text) or remove (None) files under specs/, commit and push; the commit."""
        for name, text in files.items():
            target = self.work / "specs" / name
            if text is None:
                target.unlink()
            else:
                target.write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "--allow-empty", "-m", message, cwd=self.work)
        git("push", "-q", str(self.bare), "main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)


class Running:
    """`ouro controller` as a process; ``stop`` sends SIGTERM and waits."""

    def __init__(self, repo: Path, state: Path, *args: str, interval: str = "2s",
                 env: dict[str, str] | None = None, log: Path | None = None) -> None:
        self.state = state
        self.log = log or state.parent / f"controller-{time.monotonic_ns()}.log"
        self._out = self.log.open("w")
        argv = ouro_argv("controller", "--repo", str(repo), "--interval", interval,
                         "--state-dir", str(state), *args)
        self.process = subprocess.Popen(argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                        stdout=self._out, stderr=subprocess.STDOUT,
                                        env=env or dict(os.environ), start_new_session=True)

    def output(self) -> str:
        return self.log.read_text()

    def status(self) -> dict[str, Any]:
        try:
            data = json.loads((self.state / ".controller" / "status.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def lineage(self, name: str) -> dict[str, Any]:
        found = self.status().get("lineages", {}).get(name, {})
        return found if isinstance(found, dict) else {}

    def condition(self, name: str, kind: str) -> dict[str, Any]:
        for item in self.lineage(name).get("conditions", []):
            if item.get("type") == kind:
                return dict(item)
        return {}

    def wait(self, check: Check, what: str, timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            if self.process.poll() is not None:
                raise AssertionError(f"the controller exited ({self.process.returncode}) "
                                     f"before {what}:\n{self.output()}")
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}:\n{self.output()[-4000:]}")

    def stop(self, timeout: float = 120) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            self._out.close()

    def kill(self) -> None:
        """SIGKILL the controller (its sandboxes die with it: bwrap --die-with-parent)."""
        self.process.kill()
        self.process.wait(30)
        self._out.close()


def events(state: Path) -> list[dict[str, Any]]:
    path = state / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Hook:
    """A loopback webhook: records each POST's JSON; answers ``status`` after ``delay``."""

    def __init__(self, status: int = 200, delay: float = 0.0) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.received: list[dict[str, Any]] = []
        self.attempts = 0
        self.times: list[float] = []  # when each attempt came (time.time())
        self.answered = 0
        self.paths: set[str] = set()
        self.authorization: set[str] = set()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                hook.attempts += 1
                hook.times.append(time.time())
                hook.paths.add(self.path)
                hook.authorization.add(self.headers.get("authorization", ""))
                if delay:
                    time.sleep(delay)
                if status < 300:
                    hook.received.append(json.loads(body))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()
                hook.answered += 1

            def log_message(self, *args: Any) -> None:
                del args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def events(self) -> list[str]:
        return [str(item.get("event")) for item in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
