"""Physics release 5: brokers forked by one fork server per process, not a fresh Python
per generation. Kept: only the generation's broker holds the key (never the server),
each generation its own ledger and audit, a crash closes its request's record, and a
killed kernel process leaves neither the server nor a broker behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from reconciler.kernel.base.config import ModelConfig
from reconciler.kernel.broker import forker
from reconciler.kernel.broker.door import Broker
from tests.fakes.broker_client import post, start_broker
from tests.fakes.provider_server import FakeProvider, openai_ok, script
from tests.host import alive

ECHO = ModelConfig(provider="echo", name="echo")
KEY = "sk-fork-server-0123456789abcdefghij"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _server_pid() -> int:
    assert forker._server, "no fork server was started"
    return forker._server[0][0].pid


def _memory_holds(pid: int, needle: bytes) -> bool:
    """Whether the process's writable memory holds ``needle`` (root reads any process)."""
    found = False
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if "r" not in perms or "w" not in perms:
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                if needle in mem.read(end - start):
                    found = True
            except (OSError, ValueError, OverflowError):
                continue
    return found


def test_brokers_are_forked_from_one_server_that_never_holds_the_key(tmp_path: Path) -> None:
    with FakeProvider(script(openai_ok("one"), openai_ok("two"))) as fake:
        model = ModelConfig(provider="openai", name="gpt-test", base_url=fake.url,
                            api_key_env="OPENAI_API_KEY")
        first = start_broker(tmp_path / "a", model, api_key=KEY)
        server = _server_pid()
        second = start_broker(tmp_path / "b", model, api_key=KEY)
        try:
            assert _server_pid() == server  # one server for both
            for broker in (first, second):
                assert Path(f"/proc/{broker.pid}/status").read_text().count(
                    f"PPid:\t{server}\n") == 1
            assert post(first.socket_path, "p")[0] == 200
            assert post(second.socket_path, "p")[0] == 200
            if os.getuid() == 0:
                assert _memory_holds(first.pid, KEY.encode())  # the broker does (control)
                assert not _memory_holds(server, KEY.encode())  # the server never does
            server_fds = os.listdir(f"/proc/{server}/fd")
            assert len(server_fds) < 12, server_fds  # no broker's stdin pipe kept there
        finally:
            reports = [first.stop(), second.stop()]
    # each generation its own ledger and audit
    assert [[c["response"] for c in r.model_calls] for r in reports] == [["one"], ["two"]]
    assert first.process.returncode == second.process.returncode == 0


def test_a_crashed_broker_is_seen_and_the_next_is_forked(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "a", ECHO)
    broker.process.kill()
    assert broker.process.wait(10) == -signal.SIGKILL
    broker.stop()
    again = start_broker(tmp_path / "b", ECHO)
    assert post(again.socket_path, "x")[0] == 200
    again.stop()


def test_a_dead_server_is_replaced(tmp_path: Path) -> None:
    start_broker(tmp_path / "a", ECHO).stop()
    old = _server_pid()
    os.kill(old, signal.SIGKILL)
    time.sleep(0.2)
    broker = start_broker(tmp_path / "b", ECHO)
    assert _server_pid() != old
    assert post(broker.socket_path, "x")[0] == 200
    broker.stop()


KERNEL = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from reconciler.kernel.base.config import ModelConfig
    from reconciler.kernel.broker import forker
    from reconciler.kernel.broker.door import Broker
    root = Path(sys.argv[1])
    broker = Broker.start(kernel_dir=root / "kernel", private_dir=root / "private",
                          model=ModelConfig(provider="echo", name="echo"), constraints={},
                          api_key=None, generation=1)
    print(json.dumps({"server": forker._server[0][0].pid, "broker": broker.pid}), flush=True)
    sys.stdin.read()
""")


def test_a_killed_kernel_leaves_no_server_and_no_broker(tmp_path: Path) -> None:
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, str(tmp_path)], cwd=REPO_ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert kernel.stdout is not None
        pids = json.loads(kernel.stdout.readline())
        assert alive(pids["server"]) and alive(pids["broker"])
    finally:
        kernel.kill()
        kernel.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (alive(pids["server"]) or alive(pids["broker"])):
        time.sleep(0.05)
    assert not alive(pids["server"]) and not alive(pids["broker"])
    # the broker closed its audit as any broker does when its kernel goes
    assert Broker.read_audit(tmp_path / "private") == []


# In a fresh process (this checkout's code) as the fork server is: its preload, then a fork; the
# child (a generation's broker) makes its HTTP provider with loading CA certificates
# forbidden, so it succeeds only on the context the server made before forking.
_TLS_ONCE = textwrap.dedent("""\
    import json, os, ssl, sys
    from reconciler.kernel.base.config import ModelConfig
    from reconciler.kernel.broker import forkserver, providers
    forkserver._preload()
    made = (providers.tls_context() if providers.tls_context.cache_info().currsize
            else None)  # (what the preload made, if it made one)
    pid = os.fork()
    if pid == 0:
        def refused(*args, **kwargs):
            raise RuntimeError("a forked broker loaded the CA bundle again")
        ssl.SSLContext.load_verify_locations = refused
        ssl.SSLContext.load_default_certs = refused
        try:
            provider = providers.make_provider(
                ModelConfig(provider="openai", name="m", base_url="https://127.0.0.1:9"),
                "sk-x", 0)
            pool = provider.client._transport._pool
            os.write(1, json.dumps({"same": pool._ssl_context is made}).encode() + b"\\n")
            os._exit(0)
        except BaseException as exc:
            os.write(1, json.dumps({"error": repr(exc)}).encode() + b"\\n")
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"status": os.waitstatus_to_exitcode(status),
                          "required": made is not None
                                      and made.verify_mode == ssl.CERT_REQUIRED,
                          "hostname": made is not None and made.check_hostname}))
""")


def test_a_forked_broker_verifies_tls_with_the_context_the_server_made_once() -> None:
    done = subprocess.run([sys.executable, "-c", _TLS_ONCE], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    child, parent = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(child) == {"same": True}, child
    # and it is httpx's default: certificates and host names verified
    assert json.loads(parent) == {"status": 0, "required": True, "hostname": True}


WARMED = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from reconciler.kernel.base.config import ModelConfig
    from reconciler.kernel.broker import door, forker
    root = Path(sys.argv[1])
    forker.ENABLED = sys.argv[2] == "forked"
    door.warm()
    door.warm()  # a second warm-up starts nothing more
    servers = [server.pid for server, _ in forker._server]
    if not forker.ENABLED:
        print(json.dumps({"servers": servers}), flush=True)
        sys.exit(0)
    environ = Path(f"/proc/{servers[0]}/environ").read_bytes().split(b"\\0")
    broker = door.Broker.start(kernel_dir=root / "kernel", private_dir=root / "private",
                               model=ModelConfig(provider="echo", name="echo"),
                               constraints={}, api_key=None, generation=1)
    print(json.dumps({"servers": servers, "broker": broker.pid,
                      "environ": sorted(e.decode() for e in environ if e),
                      "now": [server.pid for server, _ in forker._server]}), flush=True)
    sys.stdin.read()
""")


def test_a_warmed_server_is_started_once_and_forks_the_first_broker(tmp_path: Path) -> None:
    """``door.warm`` (an apply calls it before it births or extends a lineage): the server's
    start-up is no longer the first generation's; the server is the one that forks the first
    broker, it has no generation's HOME, and a killed kernel still leaves nothing behind."""
    kernel = subprocess.Popen([sys.executable, "-c", WARMED, str(tmp_path), "forked"],
                              cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert kernel.stdout is not None
        seen = json.loads(kernel.stdout.readline())
        (server,) = seen["servers"]
        assert seen["now"] == [server]  # the broker came from the warmed server
        assert f"PPid:\t{server}\n" in Path(f"/proc/{seen['broker']}/status").read_text()
        assert seen["environ"] == ["HOME=/", "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin",
                                   "TMPDIR=/tmp"]
    finally:
        kernel.kill()
        kernel.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (alive(server) or alive(seen["broker"])):
        time.sleep(0.05)
    assert not alive(server) and not alive(seen["broker"])


def test_no_server_is_warmed_where_brokers_are_not_forked(tmp_path: Path) -> None:
    """A pinned kernel's own process (``forker.ENABLED`` False) starts no server."""
    done = subprocess.run([sys.executable, "-c", WARMED, str(tmp_path), "fresh"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"servers": []}


# A fresh process as the fork server is: a loopback provider first (its own imports), then
# the preload, then one request through each HTTP provider as a broker makes it.
_NOTHING_MORE = textwrap.dedent("""\
    import json, sys
    from tests.fakes.provider_server import FakeProvider, anthropic_ok, chat_ok, openai_ok
    from reconciler.kernel.base.config import ModelConfig
    from reconciler.kernel.broker import forkserver, providers
    replies = {"/v1/messages": anthropic_ok("a"), "/v1/responses": openai_ok("b"),
               "/v1/chat/completions": chat_ok("c")}
    with FakeProvider(lambda seen, number: replies[seen.path]) as fake:
        forkserver._preload()
        before = set(sys.modules)
        texts = []
        for kind in ("anthropic", "openai", "openai-compatible"):
            base = fake.url + ("" if kind == "anthropic" else "/v1")  # (each one's own)
            provider = providers.make_provider(
                ModelConfig(provider=kind, name="m", base_url=base,
                            api_key_env=None if kind == "openai-compatible" else "K"),
                None if kind == "openai-compatible" else "sk-x", 0)
            texts.append(provider.attempt("prompt", 100, 10).text)
            provider.close()
        print(json.dumps({"texts": texts, "imported": sorted(set(sys.modules) - before)}))
""")


def test_a_broker_imports_nothing_the_server_did_not() -> None:
    """What a broker imports is paid for in every generation (httpcore, h11 and the idna
    codec were ~15 ms of each HTTP broker's CPU): the server's preload holds it all."""
    done = subprocess.run([sys.executable, "-c", _NOTHING_MORE], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"texts": ["a", "b", "c"], "imported": []}
