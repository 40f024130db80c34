"""The kernel that ran each generation, stop reasons and why a lineage stops: the viewer's
pages (starlette's test client) and `ouro show` over lineages whose records are absent,
null, malformed, huge or hostile. Every page answers 200 and every `show` exits 0:
"not recorded" or "malformed", never a 500 or a traceback."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette 1.x prefers httpx2 for its test client
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from reconciler.cli import main
from reconciler.spec.models import ModelSpec
from reconciler.state.ran_with import MALFORMED, NOT_RECORDED, RECORDED, kernel_run
from reconciler.state.summaries import summarize
from reconciler.viewer.app import FleetSource, Shown, create_app
from tests.observe.builder import TEST_IDENTITY, LineageBuilder

TOKEN = "t0ken-for-kernel-tests"
KERNEL = {"commit": TEST_IDENTITY.commit, "fingerprint": TEST_IDENTITY.fingerprint,
          "source": "store", "package": "ouro_kernel_0123456789abcdef",
          "entry": "ouro-kernel-request/v1"}
RAN_WITH = {"kernel": KERNEL,
            "control_plane": {"ouro_version": "0.1.0", "ouro_commit": "f" * 40},
            "versions": {"emacs": "GNU Emacs 28.2", "bubblewrap": "bubblewrap 0.8.0"}}
MISSING = object()  # the key left out of the observation
SHAPES: dict[str, Any] = {
    "absent": MISSING, "null": None, "string": "<script>x</script>", "list": [1, 2],
    "number": 7, "kernel-a-list": {**RAN_WITH, "kernel": ["a"]},
    "no-fingerprint": {**RAN_WITH, "kernel": {"commit": "abc"}},
    "versions-a-string": {**RAN_WITH, "versions": "GNU Emacs"},
    "huge": {**RAN_WITH, "kernel": {**KERNEL, "commit": "c" * 3_000_000}},
}
EXPECTED = {"absent": NOT_RECORDED, "null": NOT_RECORDED, "huge": RECORDED}


def _call(**fields: Any) -> dict[str, Any]:
    return {"request_index": 1, "http_status": 200, "accounted_usd": "0.01",
            "usage": {"input_tokens": 5, "output_tokens": 7}, "stop_reason": "end_turn",
            "truncated": False, **fields}


def _gen(builder: LineageBuilder, ran_with: Any = RAN_WITH, status: str = "no-change",
         **record: Any) -> None:
    if ran_with is not MISSING:
        record["ran_with"] = ran_with
    builder.gen(status, **record)


def _client(source: dict[str, Shown], tmp_path: Path) -> TestClient:
    fleet = FleetSource(lambda: source, fixed=True)
    fleet.cache_dir = tmp_path / "cache"
    return TestClient(create_app(fleet, TOKEN), base_url="http://127.0.0.1")


def _get(client: TestClient, path: str) -> str:
    response = client.get(f"{path}?token={TOKEN}")
    assert response.status_code == 200, (path, response.status_code, response.text[:2000])
    return response.text


def _show(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          *args: str) -> str:
    monkeypatch.setattr(sys, "argv", ["ouro", "show", *args])
    try:
        main()
    except SystemExit as exit_:
        assert not exit_.code, capsys.readouterr()
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return captured.out


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_of_ran_with_renders(shape: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    builder = LineageBuilder(state, "odd")
    _gen(builder)  # gen 1: a well-formed record under the born-under kernel
    _gen(builder, SHAPES[shape])
    expected = EXPECTED.get(shape, MALFORMED)
    row = summarize(builder.paths, state / ".summaries").rows[1]
    assert row.ran_with == expected
    client = _client({"odd": Shown(builder.paths, 2)}, tmp_path)
    page = _get(client, "/lineage/odd/gen/2")
    lineage = _get(client, "/lineage/odd")
    _get(client, "/")
    text = _show(monkeypatch, capsys, "odd", "2")
    document = json.loads(_show(monkeypatch, capsys, "odd", "2", "--json"))
    assert document["kernel"]["ran_with"]["status"] == expected
    if expected == NOT_RECORDED:
        assert "not recorded (written by the original instrument" in page
        assert "ran with: not recorded" in text
        assert "1 generation without a recorded kernel" in lineage
    elif expected == MALFORMED:
        assert "malformed:" in page and "ran with: malformed:" in text
        assert "Malformed kernel records" in lineage
    else:  # huge: recorded, cut to a bounded length on every surface
        assert len(page) < 200_000 and len(text) < 200_000
        assert document["kernel"]["ran_with"]["commit"].endswith("… (3000000 chars)")
        assert len(row.kernel_commit or "") < 300  # the cache's rows stay small
    assert "<script>x</script>" not in page  # a string ran_with is never markup


def test_the_kernel_is_shown_and_a_foreign_one_is_flagged(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    builder = LineageBuilder(state, "mixed")
    _gen(builder)
    other = {**RAN_WITH, "kernel": {**KERNEL, "fingerprint": "e" * 64}}
    _gen(builder, other)
    client = _client({"mixed": Shown(builder.paths, None)}, tmp_path)
    page = _get(client, "/lineage/mixed/gen/1")
    assert f"<code class=\"kernel-commit\" title=\"{TEST_IDENTITY.commit}\">" \
           f"{TEST_IDENTITY.commit[:12]}</code>" in page
    assert TEST_IDENTITY.fingerprint in page and "ouro_kernel_0123456789abcdef" in page
    assert "GNU Emacs 28.2" in page and "bubblewrap 0.8.0" in page
    assert "class=\"foreign\"" not in page
    foreign = _get(client, "/lineage/mixed/gen/2")
    assert "fingerprint differs from the one its lineage was born under" in foreign
    lineage = _get(client, "/lineage/mixed")
    assert "Generations under another kernel" in lineage and "gen 2</a>: ran with" in lineage
    assert f"fingerprint <code>{TEST_IDENTITY.fingerprint}</code>" in lineage  # pinned to
    assert "1 under another kernel" in _get(client, "/")
    text = _show(monkeypatch, capsys, "mixed", "2")
    assert "DIFFERS: this generation's kernel fingerprint" in text
    assert f"born under {TEST_IDENTITY.commit[:12]} fingerprint {TEST_IDENTITY.fingerprint}" \
        in text
    assert json.loads(_show(monkeypatch, capsys, "mixed", "2", "--json"))["kernel"][
        "differs"] == "fingerprint"
    assert "DIFFERS" not in _show(monkeypatch, capsys, "mixed", "1")


def test_stop_reasons_per_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    builder = LineageBuilder(state, "calls")
    _gen(builder, calls=[_call(stop_reason="length", truncated=True),
                         _call(request_index=2, stop_reason="<b>odd</b>",
                               usage_exceeds_request=True),
                         "not a call", _call(request_index=3, stop_reason=["x"])],
         usage_exceeds_request=True)
    page = _get(_client({"calls": Shown(builder.paths, 1)}, tmp_path), "/lineage/calls/gen/1")
    assert '<strong class="truncated">TRUNCATED</strong>' in page
    assert '<code class="stop-reason">length</code>' in page
    assert "&lt;b&gt;odd&lt;/b&gt;" in page and "<b>odd</b>" not in page
    assert "usage exceeds the request" in page
    text = _show(monkeypatch, capsys, "calls", "1")
    assert "http 200, stop length, TRUNCATED (cut off at the output-token limit)" in text
    assert "stop <b>odd</b>, usage exceeds the request" in text
    stops = json.loads(_show(monkeypatch, capsys, "calls", "1", "--json"))["model_stops"]
    assert [(s["stop_reason"], s["truncated"]) for s in stops] == [
        ("length", True), ("<b>odd</b>", False), (None, False)]
    assert summarize(builder.paths).rows[0].truncated_calls == 1


def _failure(code: str, *, final: bool = False, every: bool = True) -> dict[str, Any]:
    return {"code": code, "http_status": 401 if final else 503, "retryable": not final,
            "attempts": 1, "calls": 1, "failed_calls": 1, "every_call_failed": every,
            "reason": "x", "stops_lineage": final,
            "message": f"model unavailable ({401 if final else 503})"}


def test_a_final_failure_stops_the_lineage_whatever_the_spec(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path, "keyed")
    _gen(builder, provider_failure=_failure("auth", final=True),
         calls=[_call(http_status=502, error="model_unavailable",
                      error_detail="http_401: <img src=x onerror=alert(1)>")])
    spec = ModelSpec.model_validate({"provider": "anthropic", "name": "claude-opus-4-8",
                                     "budget_usd": "1", "api_key_env": "MY_KEY"})
    with_spec = _client({"keyed": Shown(builder.paths, 3, spec)}, tmp_path)
    lineage = _get(with_spec, "/lineage/keyed")
    assert "stopped after gen 1 (auth)" in lineage and "set MY_KEY to a valid key" in lineage
    assert "after gen 1: auth" in _get(with_spec, "/")
    page = _get(with_spec, "/lineage/keyed/gen/1")
    assert "final; stops the lineage" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img src=x" not in page
    without = _client({"keyed": Shown(builder.paths, None)}, tmp_path / "other")
    lineage = _get(without, "/lineage/keyed")
    assert "stopped after gen 1 (auth)" in lineage and "give `ouro view` the spec" in lineage


def test_a_run_of_failed_generations_stops_only_at_the_specs_k(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path, "flaky")
    _gen(builder)
    for _ in range(2):
        _gen(builder, provider_failure=_failure("server_error"))
    two = ModelSpec(provider="echo", max_failed_generations=2)
    three = ModelSpec(provider="echo", max_failed_generations=3)
    stopped = _get(_client({"flaky": Shown(builder.paths, 5, two)}, tmp_path / "a"),
                   "/lineage/flaky")
    assert "stopped after gen 3 (failed-generations)" in stopped
    going = _get(_client({"flaky": Shown(builder.paths, 5, three)}, tmp_path / "b"),
                 "/lineage/flaky")
    assert "stopped after" not in going
    assert "the last 2 generations had every model call fail (it stops at 3)" in going
    unknown = _get(_client({"flaky": Shown(builder.paths, 5)}, tmp_path / "c"),
                   "/lineage/flaky")
    assert "stopped after" not in unknown and "not known here" in unknown


def test_impossible_usage_stops_the_lineage(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path, "liar")
    _gen(builder, calls=[_call(usage_exceeds_request=True)], usage_exceeds_request=True)
    client = _client({"liar": Shown(builder.paths, 4)}, tmp_path)
    lineage = _get(client, "/lineage/liar")
    assert "stopped after gen 1 (usage-exceeds-request)" in lineage
    assert "after gen 1: usage-exceeds-request" in _get(client, "/")
    assert summarize(builder.paths).rows[0].usage_exceeds_request is True


@pytest.mark.parametrize("failure", ["auth", ["auth"], {"code": ["auth"], "stops_lineage": True},
                                     {"code": "auth" * 100_000, "stops_lineage": True,
                                      "message": 5}])
def test_a_malformed_provider_failure_never_breaks_a_page(tmp_path: Path, failure: Any,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    builder = LineageBuilder(state, "garbled")
    _gen(builder, provider_failure=failure)
    client = _client({"garbled": Shown(builder.paths, 2)}, tmp_path)
    for path in ("/", "/lineage/garbled", "/lineage/garbled/gen/1"):
        assert len(_get(client, path)) < 300_000
    assert "model failure" in _show(monkeypatch, capsys, "garbled", "1")
    json.loads(_show(monkeypatch, capsys, "garbled", "1", "--json"))


def test_kernel_run_reads_only_the_recorded_types() -> None:
    assert kernel_run(None).status == NOT_RECORDED
    assert kernel_run({}).status == NOT_RECORDED
    run = kernel_run({"ran_with": RAN_WITH})
    assert run.recorded and run.fingerprint == TEST_IDENTITY.fingerprint
    assert dict(run.versions)["emacs"] == "GNU Emacs 28.2"
    odd = kernel_run({"ran_with": {**RAN_WITH, "versions": {"emacs": 28}}})
    assert odd.status == MALFORMED and "version of emacs is a number" in (odd.problem or "")


def test_the_original_instruments_lineage_records_no_kernel(
        original_lineage: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The original instrument wrote no ``ran_with`` and no stop reasons: "not recorded",
    and its born-under kernel from its own metadata."""
    state = original_lineage.parent
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    from reconciler.state.fleet import find_lineages

    [found] = find_lineages(["fixture"], [], state)
    summary = summarize(found.paths)
    assert summary.generations > 0
    assert {row.ran_with for row in summary.rows if row.observed} == {NOT_RECORDED}
    client = _client({"fixture": Shown(found.paths, None)}, state / "viewer")
    lineage = _get(client, "/lineage/fixture")
    assert "without a recorded kernel" in lineage and "Generations under another" not in lineage
    for number in range(1, summary.generations + 1):
        page = _get(client, f"/lineage/fixture/gen/{number}")
        assert "not recorded" in page
        text = _show(monkeypatch, capsys, "fixture", str(number))
        assert "ran with: not recorded" in text and "DIFFERS" not in text
