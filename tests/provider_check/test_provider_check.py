"""The probe apply makes before a generation: one free authenticated request per provider.

Real loopback servers answer the model-list endpoint in each provider's wire format;
the verdicts are the refusal rules: a refused key, DNS, TLS or connection failure
refuses; a server without a model list passes.
"""

from __future__ import annotations

import gzip
import socket
import subprocess
import sys
import threading
from decimal import Decimal
from typing import Any

import pytest

from reconciler.engine.provider_check import Prober, ProbeResult, probe
from reconciler.kernel.base.config import ModelConfig, Price
from tests.conftest import REPO_ROOT
from tests.fakes.provider_server import (
    MODEL_LISTS,
    FakeProvider,
    Reply,
    anthropic_error,
    closed_port_url,
    openai_error,
    script,
)

KEY = "sk-probe-0123456789abcdefghij"


def model(provider: str, url: str, **overrides: Any) -> ModelConfig:
    values: dict[str, Any] = {
        "provider": provider, "name": "m", "base_url": url, "price": Price(Decimal(1), Decimal(1)),
        "api_key_env": "OURO_PROBE_KEY" if provider != "openai-compatible" else None,
    }
    values.update(overrides)
    return ModelConfig(**values)


@pytest.mark.parametrize(
    ("provider", "suffix", "path", "auth"),
    [("anthropic", "", "/v1/models", ("x-api-key", KEY)),
     ("openai", "/v1", "/v1/models", ("authorization", f"Bearer {KEY}")),
     ("openai-compatible", "/v1", "/v1/models", ("authorization", f"Bearer {KEY}"))],
    ids=["anthropic", "openai", "openai-compatible"],
)
def test_the_probe_lists_models_with_the_key_in_the_providers_header(
        provider: str, suffix: str, path: str, auth: tuple[str, str]) -> None:
    with FakeProvider(script(MODEL_LISTS[provider]())) as fake:
        found = probe(model(provider, fake.url + suffix), KEY)
    assert found.ok and found.code == "ok", found
    (seen,) = fake.requests
    assert (seen.method, seen.path) == ("GET", path)
    assert seen.headers[auth[0]] == auth[1]
    if provider == "anthropic":
        assert seen.headers["anthropic-version"] == "2023-06-01"
    assert KEY not in found.message


REFUSALS = [
    pytest.param("anthropic", anthropic_error(401, "authentication_error", "invalid x-api-key"),
                 "key-refused", id="anthropic-401"),
    pytest.param("anthropic", anthropic_error(403, "permission_error",
                                              "Your API key does not have permission"),
                 "key-refused", id="anthropic-403"),
    pytest.param("openai", openai_error(401, "invalid_api_key",
                                        f"Incorrect API key provided: {KEY}."),
                 "key-refused", id="openai-401-quotes-the-key"),
    pytest.param("openai-compatible", openai_error(403, None, "forbidden"), "key-refused",
                 id="compatible-403"),
]


@pytest.mark.parametrize(("provider", "reply", "code"), REFUSALS)
def test_a_refused_key_refuses_naming_the_variable_never_the_value(
        provider: str, reply: Reply, code: str) -> None:
    with FakeProvider(script(reply)) as fake:
        suffix = "" if provider == "anthropic" else "/v1"
        found = probe(model(provider, fake.url + suffix, api_key_env="OURO_PROBE_KEY"), KEY)
    assert not found.ok and found.code == code
    assert found.http_status == reply.status
    assert "OURO_PROBE_KEY" in found.message and "OURO_PROBE_KEY" in found.remedy
    assert KEY not in str(found) and KEY[:12] not in str(found)


@pytest.mark.parametrize(
    ("variable", "said", "remedy"),
    [("FAKE_KEY", "wants a key and was sent no key (FAKE_KEY is not set)",
      "this server wants a key: set FAKE_KEY"),
     (None, "wants a key and was sent no key (api_key_env: null)",
      "name its variable in spec.model.api_key_env")],
    ids=["variable-unset", "keyless"],
)
def test_a_key_that_was_not_sent_is_never_named_as_refused(
        variable: str | None, said: str, remedy: str) -> None:
    with FakeProvider(script(openai_error(401, "invalid_api_key", "no key"))) as fake:
        found = probe(model("openai-compatible", fake.url + "/v1", api_key_env=variable), None)
    (seen,) = fake.requests
    assert "authorization" not in seen.headers  # nothing was sent ...
    assert not found.ok and found.code == "key-refused"
    assert said in found.message and remedy in found.remedy  # ... and nothing is named
    assert "refused the key" not in str(found)


@pytest.mark.parametrize(
    ("reply", "code"),
    [(Reply(404, body=b"404 page not found"), "no-model-list"),
     (Reply(405, body=b""), "no-model-list"),
     (openai_error(429, "rate_limit_exceeded", "slow down"), "answered"),
     (Reply(503, body=b"upstream down"), "answered")],
    ids=["404-no-list", "405", "429", "503"],
)
def test_other_answers_pass(reply: Reply, code: str) -> None:
    with FakeProvider(script(reply)) as fake:
        found = probe(model("openai-compatible", fake.url + "/v1"), None)
    assert found.ok and found.code == code, found


def test_a_refused_connection_refuses() -> None:
    found = probe(model("openai", closed_port_url() + "/v1"), KEY)
    assert not found.ok and found.code == "unreachable"
    assert "cannot connect" in found.message and "base_url" in found.remedy


def test_tls_to_a_plain_http_server_refuses_as_tls() -> None:
    with FakeProvider(script(MODEL_LISTS["openai"]())) as fake:
        found = probe(model("openai", fake.url.replace("http://", "https://") + "/v1"), KEY)
    assert not found.ok and found.code == "tls", found
    assert "TLS" in found.message


IN_NO_NETWORK = """
import json, sys
from decimal import Decimal
from reconciler.engine.provider_check import probe
from reconciler.kernel.base.config import ModelConfig, Price
model = ModelConfig(provider="anthropic", name="m", base_url="https://no-such-host.invalid",
                    api_key_env="OURO_PROBE_KEY", price=Price(Decimal(1), Decimal(1)))
found = probe(model, sys.argv[1])
print(json.dumps({"ok": found.ok, "code": found.code, "message": found.message}))
"""


def test_a_name_that_does_not_resolve_refuses_as_dns() -> None:
    """The real resolver's own failure, through httpx's real transport: the probe runs in
    a network namespace of its own (bwrap --unshare-net, nothing but a down loopback), so
    the lookup fails on this host and no DNS packet leaves it."""
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from tests.host import require

    bwrap = shutil.which("bwrap")
    require(bwrap is not None, "needs bwrap for a network namespace without a resolver")
    assert bwrap is not None
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [bwrap, "--dev-bind", "/", "/", "--unshare-net", "--die-with-parent", "--",
         sys.executable, "-c", IN_NO_NETWORK, KEY],
        cwd=root, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert not found["ok"] and found["code"] == "dns", found
    assert "does not resolve" in found["message"]
    assert KEY not in found["message"]


def test_a_silent_server_times_out() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts, never answers
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        found = probe(model("openai-compatible", url), None, timeout=0.5)
    finally:
        listener.close()
    assert not found.ok and found.code == "timeout"


def test_offline_providers_are_not_probed() -> None:
    assert probe(ModelConfig(provider="echo", name="echo"), None).ok


def test_an_offline_provider_costs_no_http_client() -> None:
    """(httpx's import was ~50 ms of an offline apply, the default fleet's.)"""
    program = ("import sys\n"
               "from reconciler.engine.provider_check import Prober\n"
               "from reconciler.kernel.base.config import ModelConfig\n"
               "from reconciler.kernel.base.registry import OFFLINE_PROVIDERS\n"
               "assert set(OFFLINE_PROVIDERS) == {'echo', 'replay'}\n"
               "for provider in OFFLINE_PROVIDERS:\n"
               "    assert Prober().check(ModelConfig(provider=provider, name='m'), None).ok\n"
               "print('httpx' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr


def test_a_prober_probes_each_configuration_once_even_in_parallel() -> None:
    calls: list[tuple[str, str | None]] = []
    gate = threading.Event()

    def slow(config: ModelConfig, key: str | None) -> ProbeResult:
        calls.append((config.provider, config.base_url))
        gate.wait(5)
        return ProbeResult(True, "ok", "fine")

    prober = Prober(slow)
    a = model("openai", "http://127.0.0.1:1/v1")
    b = model("openai", "http://127.0.0.1:2/v1")
    results: list[ProbeResult] = []
    threads = [threading.Thread(target=lambda m=m: results.append(prober.check(m, KEY)))
               for m in (a, a, a, b)]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(10)
    assert len(results) == 4 and all(r.ok for r in results)
    assert sorted(calls) == [("openai", "http://127.0.0.1:1/v1"),
                             ("openai", "http://127.0.0.1:2/v1")]


def test_a_probe_bug_refuses_instead_of_raising() -> None:
    def broken(config: ModelConfig, key: str | None) -> ProbeResult:
        raise RuntimeError("bug")

    found = Prober(broken).check(model("openai", "http://127.0.0.1:1/v1"), KEY)
    assert not found.ok and "--no-provider-check" in found.remedy



def _peak_rss_of_a_probe(url: str) -> tuple[int, str]:
    """Probe ``url`` in a fresh interpreter; its peak RSS in KiB and the probe's message."""
    code = (
        "import resource, sys\n"
        "from tests.provider_check.test_provider_check import model\n"
        "from reconciler.engine.provider_check import probe\n"
        "found = probe(model('openai-compatible', sys.argv[1]), None)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        "print(found.code, found.message[:300])\n")
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                          timeout=120, cwd=REPO_ROOT, check=False)
    assert done.returncode == 0, done.stderr
    peak, message = done.stdout.split("\n", 1)
    return int(peak), message


def test_a_compressed_bomb_is_never_inflated() -> None:
    """A few KB of stacked gzip would inflate to 256 MiB if decoded; the probe asks for
    identity and reads the body raw, so its peak memory stays where a plain reply's is."""
    inner = gzip.compress(b"\0" * (256 << 20), compresslevel=9)
    bomb = gzip.compress(inner, compresslevel=9)
    assert len(bomb) < 64 << 10
    stacked = Reply(401, body=bomb, headers={"content-encoding": "gzip, gzip"})
    with FakeProvider(script(Reply(401, body=b"no"))) as plain:
        baseline, _ = _peak_rss_of_a_probe(plain.url + "/v1")
    with FakeProvider(script(stacked)) as fake:
        peak, message = _peak_rss_of_a_probe(fake.url + "/v1")
        assert fake.requests[0].headers["accept-encoding"] == "identity"
    assert message.startswith("key-refused"), message
    assert peak - baseline < 64 << 10, f"the probe grew by {(peak - baseline) >> 10} MiB"


def test_the_flag_that_skips_it_is_named_for_it_and_the_old_name_is_hidden() -> None:
    import os

    from tests.apply.helpers import run_ouro

    shown = run_ouro("apply", "--help", env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "--no-provider-check" in shown.stdout and "the provider check" in shown.stdout
    assert "--no-probe" not in shown.stdout  # still taken (tests/apply/test_model_failures)
