"""A broken model never burns generations silently: apply end to end against loopback
servers speaking each provider's exact wire format (real sandbox, real repositories).

Probe first (a refused key creates nothing), record the failure (observation, journal,
subject, events, report), stop the lineage (a final failure at once, retryable ones after
max_failed_generations in a row), and let the other lineages go on.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.broker.ledger import PROMPT_FRAMING_TOKENS
from tests.apply.helpers import (
    REPO_ROOT,
    assert_invariant,
    generation_subjects,
    report,
    run_ouro,
    write_spec,
)
from tests.fakes.provider_server import (
    MODEL_LISTS,
    FakeProvider,
    Handler,
    Reply,
    Seen,
    anthropic_error,
    chat_ok,
    openai_error,
)
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

KEY = "sk-apply-failure-0123456789abcdef"
VARIABLE = "OURO_FAILURE_TEST_KEY"
DASH = "\u2014"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    return {**env, VARIABLE: KEY}


def route(provider: str, generate: Reply, models: Reply | None = None) -> Handler:
    """GET .../models answers the model list (or ``models``); every POST answers ``generate``."""

    def handler(seen: Seen, number: int) -> Reply:
        del number
        if seen.method == "GET":
            return models or MODEL_LISTS[provider]()
        return generate

    return handler


def paid_spec(specs: Path, name: str, provider: str, url: str, generations: int,
              extra: str = "") -> None:
    names = {"anthropic": "claude-opus-4-8", "openai": "gpt-5.6",
             "openai-compatible": "local-model"}
    model = f"name: {names[provider]}\nbase_url: {url}\nbudget_usd: \"0.50\"\n"
    if provider == "openai-compatible":
        model += 'price: {input_usd_per_mtok: "1", output_usd_per_mtok: "2"}\n'
        model += f"api_key_env: {VARIABLE}\n"
    else:
        model += f"api_key_env: {VARIABLE}\n"
    write_spec(specs, name, generations, provider=provider, extra_model=model + extra)


def events(tmp_path: Path) -> list[dict[str, Any]]:
    text = (tmp_path / "state" / "events.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def observation(tmp_path: Path, name: str, number: int) -> dict[str, Any]:
    paths = lineage_paths(tmp_path / "state", name)
    record: dict[str, Any] = json.loads(
        (paths.observations / "generations" / f"{number:04d}.json").read_text())
    return record


def test_a_refused_key_is_found_by_the_probe_and_nothing_is_created(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    refused = anthropic_error(401, "authentication_error", "invalid x-api-key")
    with FakeProvider(route("anthropic", refused, models=refused)) as fake:
        paid_spec(specs, "keyed", "anthropic", fake.url, 3)
        write_spec(specs, "calm", 1)
        result = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert result.returncode == 1
    by_name = {item["name"]: item for item in report(result)["lineages"]}
    (error,) = by_name["keyed"]["errors"]
    assert VARIABLE in error and "refused" in error and "nothing was created" in error
    assert KEY not in result.stdout + result.stderr
    assert [(s.method, s.path) for s in fake.requests] == [("GET", "/v1/models")]
    assert not (tmp_path / "state" / "keyed").exists()
    assert not (tmp_path / "state" / "keyed.git").exists()
    assert by_name["calm"]["final_action"] == "in-sync"
    (probe,) = [e for e in events(tmp_path) if e["event"] == "probe-failed"]
    assert probe["code"] == "key-refused" and probe["http_status"] == 401


FINAL = [
    pytest.param("anthropic", anthropic_error(401, "authentication_error", "invalid x-api-key"),
                 # --no-probe: the old name of --no-provider-check, still taken
                 "auth", 401, ["--no-probe"], id="anthropic-401-without-probe"),
    pytest.param("openai", openai_error(429, "insufficient_quota",
                                        "You exceeded your current quota, please check your "
                                        "plan and billing details.", "insufficient_quota"),
                 "quota", 429, [], id="openai-quota"),
    pytest.param("anthropic", anthropic_error(404, "not_found_error", "model: claude-opus-4-8"),
                 "unknown_model", 404, [], id="anthropic-unknown-model"),
    pytest.param("openai-compatible", openai_error(403, None, "not allowed to use this model"),
                 "permission", 403, [], id="compatible-403"),
    pytest.param("openai", openai_error(400, "invalid_value", "Invalid 'max_output_tokens'"),
                 "invalid_request", 400, [], id="openai-invalid-request"),
]


@pytest.mark.parametrize(("provider", "reply", "code", "http", "flags"), FINAL)
@pytest.mark.slow  # 10 s or more on a loaded 2-core host
def test_a_final_failure_stops_the_lineage_after_one_generation(
        specs: Path, env: dict[str, str], tmp_path: Path, provider: str, reply: Reply,
        code: str, http: int, flags: list[str]) -> None:
    suffix = "" if provider == "anthropic" else "/v1"
    with FakeProvider(route(provider, reply)) as fake:
        paid_spec(specs, "broken", provider, fake.url + suffix, 3)
        write_spec(specs, "calm", 2)
        result = run_ouro("apply", "--yes", "--json", *flags, str(specs), env=env)
        plan = run_ouro("plan", str(specs), env=env)
        status = run_ouro("status", "--json", str(specs), env=env)
        shown = run_ouro("status", str(specs), env=env)
    assert result.returncode == 1, result.stderr
    lines = {item["name"]: item for item in json.loads(status.stdout)["lineages"]}
    assert lines["broken"]["model_failures"] == 1
    assert lines["broken"]["last_model_failure"]["code"] == code
    assert lines["calm"]["model_failures"] == 0
    assert "model failed in 1 generation\n" in shown.stdout
    assert (f"last generation (gen 1): model unavailable ({http}) ({code}, final; stops the "
            "lineage)") in shown.stdout
    by_name = {item["name"]: item for item in report(result)["lineages"]}
    broken = by_name["broken"]
    assert broken["generations_run"] == 1 and broken["stopped"] == code
    assert broken["model_failures"] == 1 and broken["last_model_failure"]["code"] == code
    (error,) = broken["errors"]
    assert "stopped after gen 1" in error and "run apply again" in error
    assert KEY not in result.stdout + result.stderr
    assert by_name["calm"]["final_action"] == "in-sync"  # the others go on
    paths = lineage_paths(tmp_path / "state", "broken")
    assert_invariant(paths, 1)  # the generation that ran stays history
    assert generation_subjects(paths) == [f"gen 1: no-change {DASH} model unavailable ({http})"]
    journal = (paths.worktree / "journal.md").read_text()
    assert f"## gen 1 {DASH} no-change {DASH} model unavailable ({http}) {DASH} " in journal
    record = observation(tmp_path, "broken", 1)
    assert record["outcome"] == "no-change"
    failure = record["provider_failure"]
    assert (failure["code"], failure["http_status"], failure["retryable"]) == \
        (code, http, False)
    assert failure["attempts"] == 1 and failure["stops_lineage"] is True
    logged = events(tmp_path)
    (generation,) = [e for e in logged if e["event"] == "generation"
                     and e["lineage"] == "broken"]
    assert generation["provider_failure"]["code"] == code
    (stopped,) = [e for e in logged if e["event"] == "lineage-stopped"]
    assert stopped["reason"] == code and stopped["generation"] == 1
    assert f"gen 1: model unavailable ({http}): {code}, final" in plan.stdout + plan.stderr
    posts = [s for s in fake.requests if s.method == "POST"]
    assert len(posts) == 1


@pytest.mark.slow  # 10 s or more on a loaded 2-core host
def test_retryable_failures_stop_the_lineage_after_max_failed_generations(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    down = Reply(503, body=b"upstream unavailable", headers={"retry-after-ms": "0"})
    with FakeProvider(route("openai-compatible", down)) as fake:
        paid_spec(specs, "flaky", "openai-compatible", fake.url + "/v1", 5,
                  extra="max_failed_generations: 2\nrequest_timeout: 5s")
        first = run_ouro("apply", "--yes", str(specs), env=env)
        second = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert first.returncode == 1, first.stderr
    assert "gen 1: 503, retry in" in first.stderr and "(2/6)" in first.stderr
    assert "2 generations in a row had every model call fail" in first.stdout  # the summary
    assert "2 generations in a row" not in first.stderr  # said once: stderr points to it
    assert ("flaky: stopped (failed-generations); apply's summary (on stdout, at the end) "
            "says why") in first.stderr
    paths = lineage_paths(tmp_path / "state", "flaky")
    # the run of failures goes on across applies: the next apply tries once more, then stops
    assert second.returncode == 1
    assert report(second)["lineages"][0]["generations_run"] == 1
    assert report(second)["lineages"][0]["stopped"] == "failed-generations"
    assert_invariant(paths, 3)
    for number in (1, 2, 3):
        failure = observation(tmp_path, "flaky", number)["provider_failure"]
        assert failure["code"] == "server_error" and failure["retryable"] is True
        assert failure["every_call_failed"] is True and failure["attempts"] >= 2
    retries = [e for e in events(tmp_path) if e["event"] == "model-retry"]
    assert retries and all(e["http_status"] == 503 for e in retries)
    shown = run_ouro("show", "flaky", "1", env=env)  # the retried call: its peak, not the sum
    assert re.search(r"reserved \$[0-9.]+ at most at once \(the peak of \d+ attempts, each "
                     r"returned when it ended\)", shown.stdout), shown.stdout
    assert {e["generation"] for e in retries} == {1, 2, 3}


def test_an_empty_completion_is_a_reply_that_keeps_the_version_not_a_failure(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    """Physics release 5 (issue 41): the seed's prompt says an empty reply keeps the
    current version. Three empty completions under max_failed_generations 1: three
    no-change generations, no model failure, the lineage not stopped."""
    with FakeProvider(route("openai-compatible", chat_ok("", 1000, 0))) as fake:
        paid_spec(specs, "terse", "openai-compatible", fake.url + "/v1", 3,
                  extra="max_failed_generations: 1")
        done = run_ouro("apply", "--yes", "--json", str(specs), env=env)
        status = run_ouro("status", "--json", str(specs), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    row = report(done)["lineages"][0]
    assert (row["generations_run"], row.get("stopped")) == (3, None)
    for number in (1, 2, 3):
        record = observation(tmp_path, "terse", number)
        assert record["outcome"] == "no-change" and record["provider_failure"] is None
        assert [call["http_status"] for call in record["model_calls"]] == [200]
    assert json.loads(status.stdout)["lineages"][0]["model_failures"] == 0
    assert_invariant(lineage_paths(tmp_path / "state", "terse"), 3)


def test_usage_beyond_what_a_request_could_cost_stops_the_lineage(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    lying = chat_ok("", prompt_tokens=50_000_000, completion_tokens=3)
    with FakeProvider(route("openai-compatible", lying)) as fake:
        paid_spec(specs, "liar", "openai-compatible", fake.url + "/v1", 3)
        result = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert result.returncode == 1
    (lineage,) = report(result)["lineages"]
    assert lineage["stopped"] == "usage-exceeds-request" and lineage["generations_run"] == 1
    record = observation(tmp_path, "liar", 1)
    assert record["usage_exceeds_request"] is True
    (call,) = record["model_calls"]
    assert call["usage"]["input_tokens"] == 50_000_000  # recorded as reported
    # accounted with the input clamped to what the prompt could cost, not the $50 reported
    # (issue 24); the 3 output tokens as reported
    clamped = (Decimal(call["prompt_bytes"] + PROMPT_FRAMING_TOKENS) * 1 + 3 * 2) / 10**6
    assert Decimal(call["accounted_usd"]) == clamped <= Decimal(call["reserved_usd"])



def compatible_spec(specs: Path, name: str, url: str, variable: str | None) -> None:
    model = (f"name: local-model\nbase_url: {url}\nbudget_usd: \"0.50\"\n"
             'price: {input_usd_per_mtok: "1", output_usd_per_mtok: "2"}\n'
             f"api_key_env: {variable or 'null'}\n")
    write_spec(specs, name, 2, provider="openai-compatible", extra_model=model)


def test_an_unset_key_variable_is_refused_by_the_plan_and_never_named_as_refused(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    """The user's spec: openai-compatible, api_key_env naming a variable that is not set,
    a server that wants a key. Plan refuses it (as for openai); `api_key_env: null` is how a
    keyless server is written, and then no message names a key that was never sent."""
    refused = openai_error(401, "invalid_api_key", "You didn't provide an API key.")
    with FakeProvider(route("openai-compatible", refused, models=refused)) as fake:
        compatible_spec(specs, "local", fake.url + "/v1", "FAKE_KEY")
        plan = run_ouro("plan", str(specs), env=env)
        applied = run_ouro("apply", "--yes", str(specs), env=env)
        assert fake.requests == []  # refused before any request, and nothing created
        assert not (tmp_path / "state" / "local.git").exists()
        compatible_spec(specs, "local", fake.url + "/v1", None)
        probed = run_ouro("apply", "--yes", "--json", str(specs), env=env)
        unprobed = run_ouro("apply", "--yes", "--json", "--no-provider-check", str(specs), env=env)
    assert plan.returncode == 1
    words = ("api_key_env names FAKE_KEY, which is not set here, so no key would be sent: "
             "set FAKE_KEY, or write `api_key_env: null` for a server that takes no key")
    assert "provider-config" in plan.stdout and words in plan.stdout
    assert applied.returncode == 1 and words in applied.stdout
    (error,) = report(probed)["lineages"][0]["errors"]
    assert "wants a key and was sent no key (api_key_env: null)" in error
    assert "nothing was created" in error
    (lineage,) = report(unprobed)["lineages"]
    assert lineage["stopped"] == "auth" and lineage["generations_run"] == 1
    (error,) = lineage["errors"]
    assert "the provider wants a key and none was sent" in error
    for result in (plan, applied, probed, unprobed):
        assert "refused the key" not in result.stdout + result.stderr
        assert "FAKE_KEY (HTTP" not in result.stdout + result.stderr


def test_an_outage_after_the_probe_stops_the_lineage_instead_of_burning_generations(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    """The user's outage: the provider answers the probe, then goes down. The generation
    that meets the outage fails every call (retryably) and is history; before the next one
    apply probes again, finds nothing listening, stops the lineage (provider-unavailable)
    and exits 1, naming the lineage that spent a generation on failures. The next apply,
    even with --no-provider-check, probes first and runs nothing while the provider is still
    down."""
    gone = threading.Event()

    def handler(seen: Seen, number: int) -> Reply:
        del number
        if not gone.is_set():
            gone.set()  # the first request is the probe: go down, then answer it (this
            fake.server.shutdown()  # connection stays open; a new one is refused at once,
            fake.server.server_close()  # however soon the generation asks)
        return MODEL_LISTS["openai-compatible"]() if seen.method == "GET" else chat_ok("")

    with FakeProvider(handler) as fake:
        paid_spec(specs, "outage", "openai-compatible", fake.url + "/v1", 7,
                  extra="request_timeout: 5s")
        write_spec(specs, "calm", 1)
        first = run_ouro("apply", "--yes", str(specs), env=env)
        second = run_ouro("apply", "--yes", "--json", "--no-provider-check", str(specs), env=env)
        plan = run_ouro("plan", str(specs), env=env)
    assert [s.method for s in fake.requests] == ["GET"]  # the probe, then nothing listened
    assert first.returncode == 1, first.stdout + first.stderr
    out = first.stdout
    assert "outage: extend, 1 of 7 generations; ran 1 (1 no-change)" in out
    assert "stopped before gen 2: every model call of gen 1 failed (unreachable" in out
    assert "the provider still does not answer (provider openai-compatible at " in out
    assert ("Generations spent on model failures: outage 1 generation (last: gen 1, "
            "unreachable; stopped: provider-unavailable).") in out
    assert "Applied: 2 generations run" in out  # outage's 1 and calm's 1
    paths = lineage_paths(tmp_path / "state", "outage")
    assert_invariant(paths, 1)  # one generation met the outage; it stays history
    failure = observation(tmp_path, "outage", 1)["provider_failure"]
    assert (failure["code"], failure["retryable"], failure["every_call_failed"]) == \
        ("unreachable", True, True)
    assert second.returncode == 1
    (lineage,) = [item for item in report(second)["lineages"] if item["name"] == "outage"]
    assert (lineage["generations_run"], lineage["stopped"]) == (0, "provider-unavailable")
    assert_invariant(paths, 1)  # nothing more was burnt
    stops = [e for e in events(tmp_path) if e["event"] == "lineage-stopped"]
    assert [(e["reason"], e["generation"]) for e in stops] == [("provider-unavailable", 1)] * 2
    assert "apply probes the provider before gen 2" in plan.stdout


def test_replies_running_out_is_a_clear_stop_before_the_generation(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    """The default fleet's scribe (4 replies; its gen 4 dies before it asks, so gen 5 takes
    the 4th) raised to 8 generations: before gen 6 apply sees that the folder has no reply
    left and stops the lineage there (replay-exhausted), saying so, without spending a
    generation on a reply that is not there; plan says why; with a reply added, apply goes
    on."""
    replies = specs / "replies"  # a spec replays only files of its own tree
    shutil.copytree(REPO_ROOT / "specs" / "replies" / "scribe", replies)
    write_spec(specs, "scribe", 8, provider="replay", replay=str(replies))
    first = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    plan = run_ouro("plan", str(specs), env=env)
    assert first.returncode == 1, first.stdout + first.stderr
    (lineage,) = report(first)["lineages"]
    assert (lineage["generations_run"], lineage["stopped"]) == (5, "replay-exhausted")
    assert lineage["model_failures"] == 0  # no generation asked in vain
    (error,) = lineage["errors"]
    assert (f"stopped before gen 6: replay folder {replies} has 4 replies, all used by "
            "gen 5; generation 6 has none: ") in error
    assert "add replies to the folder or lower spec.generations" in error
    paths = lineage_paths(tmp_path / "state", "scribe")
    assert_invariant(paths, 5)
    newest = observation(tmp_path, "scribe", 5)
    assert (newest["replay_cursor"], newest["provider_failure"]) == (4, None)
    stops = [e for e in events(tmp_path) if e["event"] == "lineage-stopped"]
    assert [(e["reason"], e["generation"]) for e in stops] == [("replay-exhausted", 5)]
    assert ("the last apply stopped it before gen 6 (replay-exhausted): replay folder "
            f"{replies} has 4 replies") in plan.stdout
    again = run_ouro("apply", "--yes", "--json", str(specs), env=env)  # nothing added yet
    assert report(again)["lineages"][0]["generations_run"] == 0
    assert report(again)["lineages"][0]["stopped"] == "replay-exhausted"
    assert_invariant(paths, 5)
    shutil.copy(replies / "0004", replies / "0005")
    added = run_ouro("apply", "--yes", "--json", "--max-generations", "1", str(specs), env=env)
    assert report(added)["lineages"][0]["generations_run"] == 1
    assert_invariant(paths, 6)
    assert "the last apply stopped it" not in run_ouro("plan", str(specs), env=env).stdout
