"""The viewer's app without a browser (starlette's test client): headers, token, edges."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():  # starlette 1.x prefers httpx2 for its test client
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from reconciler.report.viewer.app import CSP, TOKEN_COOKIE, FleetSource, Shown, create_app
from tests.observe.builder import LineageBuilder

TOKEN = "t0ken-for-tests"


def _client(tmp_path: Path) -> tuple[TestClient, LineageBuilder]:
    grown = LineageBuilder(tmp_path, "grown")
    grown.gen("changed", calls=[{"http_status": 200, "accounted_usd": "0.02",
                                 "usage": {"input_tokens": 5, "output_tokens": 7}}])
    grown.gen("died", stderr_tail=["<b>bold</b>"])
    empty = LineageBuilder(tmp_path, "empty")
    source = FleetSource(lambda: {"grown": Shown(grown.paths, 4),
                                  "empty": Shown(empty.paths, None)}, fixed=True)
    source.cache_dir = tmp_path / "cache"
    client = TestClient(create_app(source, TOKEN), base_url="http://127.0.0.1")
    return client, grown


def test_every_page_carries_the_policy_and_the_cookie_is_strict(tmp_path: Path) -> None:
    client, _ = _client(tmp_path)
    response = client.get(f"/?token={TOKEN}")
    assert response.status_code == 200
    assert response.headers["content-security-policy"] == CSP
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    cookie = response.headers["set-cookie"]
    assert f"{TOKEN_COOKIE}={TOKEN}" in cookie and "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower()
    assert client.get("/lineage/grown").status_code == 200  # the cookie stands in now


def test_pages_of_a_lineage_with_and_without_generations(tmp_path: Path) -> None:
    client, _ = _client(tmp_path)
    fleet = client.get(f"/?token={TOKEN}").text
    assert "/lineage/grown" in fleet and "/lineage/empty" in fleet and "2 / 4" in fleet
    assert "No lineages here yet" not in fleet
    assert "0 generations" in client.get("/lineage/empty").text
    assert client.get("/plot/empty/size.svg").content.startswith(b"<?xml")
    page = client.get("/lineage/grown/gen/2").text
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page
    assert "0.02" in client.get("/lineage/grown").text


@pytest.mark.parametrize("path", ["/lineage/nobody", "/lineage/grown/gen/3",
                                  "/lineage/grown/gen/0", "/lineage/empty/gen/1",
                                  "/plot/grown/nothing.svg", "/plot/nobody/cpu.svg"])
def test_missing_things_are_404(tmp_path: Path, path: str) -> None:
    client, _ = _client(tmp_path)
    assert client.get(f"{path}?token={TOKEN}").status_code == 404


def test_heads_follow_the_lineage(tmp_path: Path) -> None:
    client, grown = _client(tmp_path)
    before = client.get(f"/api/heads?token={TOKEN}").json()
    grown.gen("no-change")
    after = client.get("/api/heads").json()
    assert before["grown"] != after["grown"] and before["empty"] == after["empty"]
    assert "3 / 4" in client.get("/").text


def test_a_non_loopback_host_is_refused(tmp_path: Path) -> None:
    client, _ = _client(tmp_path)
    response = client.get(f"/?token={TOKEN}", headers={"host": "attacker.example"})
    assert response.status_code == 400
