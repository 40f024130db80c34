"""The API key reaches the broker privately and leaves no trace anywhere a generation or a
reader could look: no argv of any process, not the broker's environment, no file the broker
writes, no audit record (even when the provider echoes it back)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from reconciler.kernel.base.config import ModelConfig
from tests.fakes.broker_client import post, start_broker
from tests.fakes.provider_server import FakeProvider, Reply, Seen, openai_ok


def all_cmdlines() -> list[bytes]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                found.append((proc / "cmdline").read_bytes())
            except OSError:
                continue
    return found


def test_the_key_is_nowhere_but_in_the_request_to_the_provider(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = f"sk-secret-{uuid.uuid4().hex}"
    other = f"sk-ant-unselected-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", key)  # in the parent's env: must not be inherited
    monkeypatch.setenv("ANTHROPIC_API_KEY", other)
    monkeypatch.setenv("OURO_SOMETHING", "inherited?")

    def handler(seen: Seen, number: int) -> Reply:
        if number == 1:  # a provider that quotes the key back in its error
            return Reply(401, {"error": {"message": f"Incorrect API key provided: {key}"}})
        return openai_ok(f"here is your key: {key}")

    with FakeProvider(handler) as fake:
        model = ModelConfig(provider="openai", name="gpt-test", base_url=fake.url,
                            api_key_env="OPENAI_API_KEY")
        broker = start_broker(tmp_path, model, api_key=key)
        try:
            for needle in (key, other):
                assert not [c for c in all_cmdlines() if needle.encode() in c]
            environ = Path(f"/proc/{broker.pid}/environ").read_bytes()
            variables = dict(entry.split("=", 1) for entry in
                             environ.decode().split("\0") if entry)
            assert set(variables) == {"PATH", "HOME", "TMPDIR", "LANG"}
            assert key.encode() not in environ and other.encode() not in environ
            limits = Path(f"/proc/{broker.pid}/limits").read_text()
            assert [line.split()[4:6] for line in limits.splitlines()
                    if line.startswith("Max core file size")] == [["0", "0"]]
            argv = Path(f"/proc/{broker.pid}/cmdline").read_bytes().split(b"\0")
            # forked by the fork server (physics release 5): its argv and its environment
            # as exec'd, which names no generation's folder; HOME and TMPDIR are set after
            assert argv[1] == b"-I" and argv[-2:] == [b"reconciler.kernel.broker.forkserver",
                                                      b""]
            assert (variables["HOME"], variables["TMPDIR"]) == ("/", "/tmp")
            first = post(broker.socket_path, "hello")
            second = post(broker.socket_path, "hello again")
        finally:
            report = broker.stop()
    assert fake.requests[0].headers["authorization"] == f"Bearer {key}"
    assert first == (502, b"model unavailable\n")
    assert key.encode() not in first[1]
    assert second[0] == 200  # a model's text is the organism's business, passed through as is

    written = [p for root in (tmp_path / "kernel", tmp_path / "private")
               for p in root.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"capabilities.json", "audit.jsonl", "broker.log"}
    for path in written:
        data = path.read_bytes()
        if path.name == "audit.jsonl":
            data = data.replace(b"here is your key: [redacted]", b"")
        assert key.encode() not in data, path
        assert other.encode() not in data, path
    assert "[redacted]" in report.model_calls[0]["error_detail"]
    assert key not in str(report.model_calls[0])
    # the key never leaves the process through argv, even briefly, and is not in the report
    assert key not in repr(report)


def test_a_short_key_is_redacted_from_provider_errors_without_mangling_the_audit(
        tmp_path: Path) -> None:
    key = "tok"  # a local server's toy key: it occurs in ordinary words ("tokens")
    reply = Reply(403, {"error": {"message": f"key {key} is not allowed"}})
    with FakeProvider(lambda seen, number: reply) as fake:
        model = ModelConfig(provider="openai-compatible", name="local", base_url=fake.url)
        broker = start_broker(tmp_path, model, api_key=key)
        assert post(broker.socket_path, "hello")[0] == 502
        (call,) = broker.stop().model_calls
    assert "requested_output_tokens" in call and call["requested_output_tokens"] == 100
    assert "key [redacted] is not allowed" in call["error_detail"]
    assert "key [redacted] is not allowed" in call["attempts"][0]["detail"]
