"""The broker's socket contract: manifest, request validation, audit, lifecycle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base.config import Ceilings, ModelConfig, Price, constraints_manifest
from reconciler.kernel.base.errors import ProviderConfigError, RecoveryError
from reconciler.kernel.broker.door import Broker, capabilities
from reconciler.kernel.broker.ledger import PROMPT_FRAMING_TOKENS
from tests.fakes.broker_client import post, start_broker
from tests.fakes.provider_server import FakeProvider, Reply, chat_ok, script

ECHO = ModelConfig(provider="echo", name="echo", max_prompt_bytes=64, max_output_tokens=500)
REPO_ROOT = Path(__file__).resolve().parents[2]


def test_manifest_is_written_beside_the_socket_with_the_constraints_as_given(
        tmp_path: Path) -> None:
    ceilings = Ceilings(wall_seconds=300, cpu_seconds=60, memory_bytes=512 << 20)
    constraints = constraints_manifest(ceilings, ECHO)
    broker = Broker.start(kernel_dir=tmp_path / "k", private_dir=tmp_path / "p", model=ECHO,
                          constraints=constraints, api_key=None, generation=3)
    try:
        assert (tmp_path / "k" / "model.sock").is_socket()
        text = (tmp_path / "k" / "capabilities.json").read_text()
    finally:
        broker.stop()
    manifest = json.loads(text)
    assert text.endswith("}\n") and text.startswith('{\n  "schema": ')
    assert manifest == capabilities(constraints)
    assert manifest["schema"] == "ouroboros-kernel-capabilities/v1"
    assert manifest["constraints"] == constraints
    generate, journal = manifest["capabilities"]
    assert generate["name"] == "generate" and generate["transport"] == "http-over-unix"
    assert (generate["socket"], generate["method"], generate["path"]) == \
        ("/kernel/model.sock", "POST", "/generate")
    assert set(generate["errors"]) == {"400", "402", "429", "502"}
    assert journal == {"name": "journal", "kind": "read-only-file", "path": "/kernel/journal.md"}
    for word in ("echo", "price", "api_key", "provider", str(tmp_path)):
        assert word not in text


def test_manifest_matches_the_original_instruments(original_lineage: Path) -> None:
    calls = json.loads((original_lineage.parent / "fixture.observations" / "generations"
                        / "0005.json").read_text())
    prompt = calls["model_calls"][0]["prompt"]
    start = prompt.index('{\n  "schema": "ouroboros-kernel-capabilities/v1"')
    end = prompt.index("\n\n\n=== YOUR JOURNAL")
    theirs = json.loads(prompt[start:end])
    assert capabilities(theirs["constraints"]) == theirs


INVALID = [
    pytest.param(b"x" * 65, 10, "exceeds max_prompt_bytes", id="prompt-one-byte-too-large"),
    pytest.param(b"x" * 100_000, 10, "exceeds max_prompt_bytes", id="prompt-far-too-large"),
    pytest.param(b"\xff\xfe bad", 10, "not UTF-8", id="prompt-not-utf8"),
    pytest.param(b"", 10, "empty", id="prompt-empty"),
    pytest.param(b"hello", None, "is missing", id="token-header-missing"),
    pytest.param(b"hello", "ten", "not a positive integer", id="token-header-not-a-number"),
    pytest.param(b"hello", "0", "not a positive integer", id="token-header-zero"),
    pytest.param(b"hello", "-5", "not a positive integer", id="token-header-negative"),
    pytest.param(b"hello", "1e3", "not a positive integer", id="token-header-float"),
    pytest.param(b"hello", "9" * 40, "not a positive integer", id="tokens-absurd"),
]


@pytest.mark.parametrize(("body", "tokens", "reason"), INVALID)
def test_invalid_requests_get_400_and_are_audited(
        tmp_path: Path, body: bytes, tokens: Any, reason: str) -> None:
    broker = start_broker(tmp_path, ECHO)
    status, answer = post(broker.socket_path, body, tokens=tokens)
    report = broker.stop()
    assert status == 400 and answer.startswith(b"invalid request: ")
    assert reason.encode() in answer
    (call,) = report.model_calls
    assert call["http_status"] == 400 and call["error"] == "invalid_request"
    assert reason in call["error_detail"]
    assert call["attempts"] == [] and call["accounted_usd"] == "0"
    assert call["granted_output_tokens"] is None
    assert call["prompt_bytes"] == len(body)


def test_exactly_the_limits_are_accepted(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, ECHO)
    status, answer = post(broker.socket_path, "é" * 32, tokens=500)
    (call,) = broker.stop().model_calls
    assert (status, answer) == (200, b"")
    assert call["prompt_bytes"] == 64 and call["granted_output_tokens"] == 500


def test_other_paths_and_methods_are_refused(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, ECHO)
    assert post(broker.socket_path, "x", path="/other")[0] == 404
    assert post(broker.socket_path, b"", method="GET", path="/generate")[0] == 405
    assert post(broker.socket_path, "x")[0] == 200  # still serving
    calls = broker.stop().model_calls
    assert [c["request_index"] for c in calls] == [1]


def test_audit_records_have_the_contract_shape(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, ECHO, generation=7)
    post(broker.socket_path, "first")
    post(broker.socket_path, "second", tokens=None)
    report = broker.stop()
    first, second = report.model_calls
    assert list(first) == [
        "schema", "generation", "request_index", "operation", "started_at", "duration_ms",
        "requested_output_tokens", "granted_output_tokens", "prompt", "prompt_bytes",
        "prompt_sha256", "response", "response_bytes", "response_sha256", "http_status",
        "error", "error_detail", "usage", "reserved_usd", "accounted_usd", "attempts",
        "stop_reason", "provider_response_status", "truncated", "usage_exceeds_request"]
    assert first["schema"] == "ouroboros-model-call/v1" and first["operation"] == "generate"
    assert (first["generation"], first["request_index"], second["request_index"]) == (7, 1, 2)
    assert first["prompt"] == "first" and first["prompt_bytes"] == 5
    assert first["prompt_sha256"] == \
        "a7937b64b8caa58f03721bb6bacf5c78cb235febe0e70b1b84cd99541461a08e"
    assert (first["response"], first["response_bytes"]) == ("", 0)
    assert first["response_sha256"] == \
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert first["started_at"].endswith("+00:00") and isinstance(first["duration_ms"], int)
    assert second["http_status"] == 400
    assert report.accounted_usd == Decimal(0)
    lines = (tmp_path / "private" / "audit.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # a pending line precedes each provider call
    assert [(r["request_index"], r.get("phase")) for r in records] == \
        [(1, "pending"), (1, None), (2, None)]


def test_config_errors_are_raised_before_anything_starts(tmp_path: Path) -> None:
    cases = [
        (ModelConfig(provider="gemini", name="x"), None, "unknown model provider"),
        (ModelConfig(provider="openai", name="x", api_key_env="OPENAI_API_KEY"), None,
         "OPENAI_API_KEY"),
        (ModelConfig(provider="anthropic", name="x"), "", "needs an API key"),
        (ModelConfig(provider="openai-compatible", name="x"), None, "base_url"),
        (ModelConfig(provider="replay", name="x", replay_dir=tmp_path / "none"), None,
         "replay folder"),
        (ModelConfig(provider="openai", name="x", base_url="file:///etc"), "k", "http"),
        (ModelConfig(provider="openai", name="x"), "key\nx-evil: 1", "control characters"),
        (ModelConfig(provider="echo", name="x", budget_usd=Decimal("-1")), None, "negative"),
    ]
    for model, key, message in cases:
        with pytest.raises(ProviderConfigError, match=message):
            start_broker(tmp_path, model, api_key=key)
    assert not (tmp_path / "kernel").exists() and not (tmp_path / "private").exists()


def test_kill_leaves_a_pending_request_on_record_at_its_worst_case(tmp_path: Path) -> None:
    price = Price(Decimal("3.00"), Decimal("15.00"))
    with FakeProvider(script(Reply(200, chat_ok("late").json, delay=30))) as fake:
        model = ModelConfig(provider="openai-compatible", name="m", base_url=fake.url,
                            price=price, request_timeout_seconds=60)
        broker = start_broker(tmp_path, model)
        client = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; from tests.fakes.broker_client import post; "
             "post(__import__('pathlib').Path(sys.argv[1]), 'hello', tokens=1000)",
             str(broker.socket_path)], cwd=Path(__file__).resolve().parents[2],
            stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.requests
        broker.kill()
        client.kill()
        client.wait()
    (call,) = Broker.read_audit(tmp_path / "private")
    assert call["http_status"] is None and call["error"] == "interrupted"
    assert "phase" not in call
    worst = price.worst_case(5 + PROMPT_FRAMING_TOKENS, 1000)
    assert Decimal(call["reserved_usd"]) == Decimal(call["accounted_usd"]) == worst


def test_read_audit_skips_torn_lines_and_keeps_the_last_word(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").write_text(
        json.dumps({"request_index": 1, "phase": "pending", "accounted_usd": "5"}) + "\n"
        + json.dumps({"request_index": 1, "accounted_usd": "2"}) + "\n"
        + '{"request_index": 2, "accou')
    assert Broker.read_audit(tmp_path) == [{"request_index": 1, "accounted_usd": "2"}]
    assert Broker.read_audit(tmp_path / "missing") == []


def test_the_broker_exits_when_its_parent_goes_away(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, ECHO)
    assert broker.process.stdin is not None
    broker.process.stdin.close()  # what the kernel's death looks like from the broker
    assert broker.process.wait(10) == 0
    broker.stop()


def test_stop_is_graceful_and_idempotent(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, ECHO)
    post(broker.socket_path, "x")
    first = broker.stop()
    second = broker.stop()
    assert first == second and len(first.model_calls) == 1
    assert broker.process.returncode == 0
    assert not broker.socket_path.exists()


def test_sigterm_mid_idle_exits_cleanly(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, ECHO)
    os.kill(broker.pid, signal.SIGTERM)
    assert broker.process.wait(10) == 0
    broker.kill()


def test_long_kernel_paths_are_fine(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100) / ("e" * 100)
    broker = Broker.start(kernel_dir=deep / "kernel", private_dir=deep / "private", model=ECHO,
                          constraints={}, api_key=None, generation=1)
    try:
        assert len(str(broker.socket_path)) > 108
        os.chdir(broker.kernel_dir)
        assert post(Path("model.sock"), "x")[0] == 200
    finally:
        os.chdir(tmp_path)
        broker.stop()


def test_replay_cursor_continues_across_generations(tmp_path: Path) -> None:
    replies = tmp_path / "replies"
    replies.mkdir()
    for name, text in [("0001", "one"), ("0002", "two"), ("0003", "three"), (".hidden", "no"),
                       ("0002b", "two-b")]:
        (replies / name).write_text(text)
    (replies / "0004-dir").mkdir()
    (replies / "0005-link").symlink_to(replies / "0001")
    model = ModelConfig(provider="replay", name="script", replay_dir=replies)
    served = []
    for generation, cursor in [(1, 0), (2, 3)]:
        broker = start_broker(tmp_path / f"g{generation}", model, generation=generation,
                              replay_cursor=cursor)
        served += [post(broker.socket_path, "p") for _ in range(3)]
        broker.stop()
    assert served[:2] == [(200, b"one"), (200, b"two")]
    assert served[2] == (200, b"two-b")
    assert served[3] == (200, b"three")
    assert served[4][0] == 502 and served[4][1] == b"model unavailable\n"
    calls = Broker.read_audit(tmp_path / "g2" / "private")
    assert calls[1]["error"] == "model_unavailable"
    assert "replay exhausted" in calls[1]["error_detail"]
    assert "response 5 requested, 4 available" in calls[1]["error_detail"]


def test_a_private_dir_with_an_audit_is_never_reused(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, ECHO)
    post(broker.socket_path, "x")
    broker.stop()
    before = (tmp_path / "private" / "audit.jsonl").read_bytes()
    with pytest.raises(RecoveryError, match="fresh private dir"):
        start_broker(tmp_path, ECHO, generation=2)
    assert (tmp_path / "private" / "audit.jsonl").read_bytes() == before


def test_public_names_are_chosen() -> None:
    from reconciler.kernel.broker import door as broker
    from reconciler.kernel.broker import ledger, providers

    assert sorted(broker.__all__) == ["AUDIT_FILE", "Broker", "BrokerReport", "CAPABILITIES_FILE",
                                      "SOCKET_FILE", "capabilities", "check_config",
                                      "read_refused"]
    assert broker._check_config is broker.check_config  # kernel.generation's first spelling
    assert sorted(ledger.__all__) == ["Ledger", "PROMPT_FRAMING_TOKENS", "Reservation", "Usage",
                                      "estimate_prompt_tokens", "usd_text", "worst_case_usd"]
    assert "classify" in providers.__all__ and "run_request" in providers.__all__


def test_a_broker_starts_and_serves_when_the_process_holds_past_1024_descriptors(
        tmp_path: Path) -> None:
    """Physics release 3: an apply of a hundred lineages holds descriptors numbered past
    select(2)'s 1,024; the broker's start must still read its "ready" line."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1300:
        pytest.fail(f"this test needs RLIMIT_NOFILE's hard limit of 1,300 or more (it is {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        broker = start_broker(tmp_path, ECHO)
        status, _answer = post(broker.socket_path, "hi", tokens=5)
        (call,) = broker.stop().model_calls
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert status == 200 and call["http_status"] == 200


def _configuration(tmp_path: Path) -> bytes:
    from reconciler.kernel.broker.door import model_json

    (tmp_path / "kernel").mkdir()
    config = {"api_key": None, "model": model_json(ECHO),
              "constraints": constraints_manifest(Ceilings(), ECHO), "generation": 1,
              "replay_cursor": 0, "kernel_dir": str(tmp_path / "kernel"),
              "private_dir": str(tmp_path), "kernel_view": "/kernel"}
    return json.dumps(config).encode() + b"\n"


def _broker_process(tmp_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "reconciler.kernel.broker.process"],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


def test_the_configuration_line_may_arrive_in_pieces(tmp_path: Path) -> None:
    """(The broker reads its configuration in blocks now, not byte by byte.)"""
    line = _configuration(tmp_path)
    assert len(line) > 4096  # the manifest's allow list: several blocks of a pipe's reads
    process = _broker_process(tmp_path)
    assert process.stdin is not None and process.stdout is not None
    try:
        for start in range(0, len(line), 1000):
            process.stdin.write(line[start:start + 1000])
            process.stdin.flush()
            time.sleep(0.01)
        assert process.stdout.readline() == b"ready\n"
        assert (tmp_path / "kernel" / "capabilities.json").is_file()
    finally:
        process.stdin.close()  # the parent goes: the broker exits
        assert process.wait(10) == 0


def test_a_configuration_with_more_after_its_line_is_refused(tmp_path: Path) -> None:
    process = _broker_process(tmp_path)
    out, _ = process.communicate(_configuration(tmp_path) + b"more\n", timeout=30)
    assert process.returncode == 1
    assert out.startswith(b"error: JSONDecodeError: Extra data")
    assert not (tmp_path / "kernel" / "model.sock").exists()
