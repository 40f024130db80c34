"""The viewer's app without a browser (starlette's test client): headers, token, edges."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():  # starlette 1.x prefers httpx2 for its test client
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from reconciler.errors import OuroError
from reconciler.viewer.app import (
    CSP,
    FleetSource,
    Shown,
    cookie_name,
    cookie_value,
    create_app,
)
from reconciler.viewer.server import spec_stamp
from tests.observe.builder import LineageBuilder, lineage_paths

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
    value = cookie_value(TOKEN, "127.0.0.1", 0)
    assert f"{cookie_name(0)}={value}" in cookie and "HttpOnly" in cookie
    assert TOKEN not in cookie  # the cookie is not the token
    assert "samesite=strict" in cookie.lower()
    assert client.get("/lineage/grown").status_code == 200  # the cookie stands in now


def test_the_cookie_is_bound_to_its_address_and_port(tmp_path: Path) -> None:
    """A viewer with the same token on another address or port refuses another's cookie;
    the token itself in a cookie is refused too (it is not what the viewer sets)."""
    source = FleetSource(lambda: {}, fixed=True)
    source.cache_dir = tmp_path / "cache"
    mine = cookie_value(TOKEN, "127.9.8.7", 8001)
    assert mine != cookie_value(TOKEN, "127.9.8.7", 8002) != cookie_value(TOKEN, "127.0.0.1",
                                                                         8001)
    for address, port, accepted in [("127.9.8.7", 8001, True), ("127.9.8.7", 8002, False),
                                    ("127.0.0.1", 8001, False)]:
        app = create_app(source, TOKEN, hosts=["127.0.0.1", address], port=port,
                         address=address)
        client = TestClient(app, base_url=f"http://{address}")
        for value, ok in [(mine, accepted), (TOKEN, False)]:
            client.cookies.set(cookie_name(8001), value)
            client.cookies.set(cookie_name(port), value)
            assert (client.get("/").status_code == 200) is ok, (address, port, value)
            client.cookies.clear()
        assert client.get(f"/?token={mine}").status_code == 403  # nor is it the token


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


def test_a_lineage_the_spec_names_but_apply_has_not_created(tmp_path: Path) -> None:
    ghost = lineage_paths(tmp_path, "ghost")
    source = FleetSource(lambda: {"ghost": Shown(ghost, 3)}, fixed=True)
    client = TestClient(create_app(source, TOKEN), base_url="http://127.0.0.1")
    fleet = client.get(f"/?token={TOKEN}").text
    assert "not created yet" in fleet and "(0 / 3)" in fleet
    assert "Across the fleet" not in fleet  # nothing to plot
    page = client.get("/lineage/ghost").text
    assert "ghost: not created yet" in page and "asks for 3 generations" in page
    assert "0 generations" not in page and 'class="plot"' not in page
    assert not ghost.git_dir.exists()  # the viewer created nothing


def test_the_target_follows_the_spec(tmp_path: Path) -> None:
    """With specs, a changed spec file is read again: the target shown is its current one;
    a spec that stops loading keeps the last reading and says why."""
    grown = LineageBuilder(tmp_path, "grown")
    grown.gen("changed")
    target = {"value": 2, "stamp": 0, "broken": False}

    def find() -> dict[str, Shown]:
        if target["broken"]:
            raise OuroError("ouro: grown.yaml:3:5: spec.generations: not a number")
        return {"grown": Shown(grown.paths, int(target["value"]))}

    source = FleetSource(find, fixed=True, stamp=lambda: target["stamp"])
    client = TestClient(create_app(source, TOKEN), base_url="http://127.0.0.1")
    assert "1 / 2" in client.get(f"/?token={TOKEN}").text
    target["value"] = 20  # the file changed on disk: a new stamp
    assert "1 / 2" in client.get("/").text  # same stamp: not read again
    target["stamp"] = 1
    assert "1 / 20" in client.get("/").text
    assert "grown: 1 of 20 generations" in client.get("/lineage/grown").text
    target["broken"], target["stamp"] = True, 2
    fleet = client.get("/").text
    assert "1 / 20" in fleet and "spec.generations: not a number" in fleet


def test_the_stamp_changes_with_a_spec_file(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    (folder / "more").mkdir(parents=True)
    spec = folder / "more" / "a.yaml"
    spec.write_text("generations: 1\n")
    before = spec_stamp([folder])
    assert spec_stamp([folder]) == before
    spec.write_text("generations: 20\n")
    assert spec_stamp([folder]) != before


def test_two_generations_are_compared(tmp_path: Path) -> None:
    client, _ = _client(tmp_path)
    page = client.get(f"/lineage/grown/diff?from=0&to=1&token={TOKEN}")
    assert page.status_code == 200
    assert "grown: gen 0 → gen 1" in page.text and "organism.el" in page.text
    form = client.get("/lineage/grown").text
    assert 'action="/lineage/grown/diff"' in form and 'name="from"' in form
    for query in ("from=1&to=9", "from=x&to=1", "to=1"):
        assert client.get(f"/lineage/grown/diff?{query}").status_code == 404
    assert client.get("/lineage/nobody/diff?from=0&to=1").status_code == 404


def test_cumulative_spend_adds_the_known_spends(tmp_path: Path) -> None:
    import math

    from reconciler.state.summaries import summarize
    from reconciler.state.table import TableRow, lineage_table
    from reconciler.viewer.plots import PLOTS, Pick, _series, lived

    def _values(rows: list[TableRow], pick: Pick, cumulative: bool = False) -> list[float]:
        return _series(rows, pick, cumulative)[0]

    grown = LineageBuilder(tmp_path, "spender")
    for usd in ("0.02", None, "0.03"):  # the second made no call: it spent 0
        calls = [] if usd is None else [{"http_status": 200, "accounted_usd": usd,
                                          "usage": {"input_tokens": 5, "output_tokens": 7}}]
        grown.gen("changed", calls=calls)
    rows = lived(lineage_table("spender", grown.paths, summarize(grown.paths)).rows)
    cumulative = PLOTS["cumulative-spend"]
    assert _values(rows, cumulative.series[0][1], cumulative.cumulative) == pytest.approx(
        [0.02, 0.02, 0.05])
    assert _values(rows, PLOTS["spend"].series[0][1]) == pytest.approx([0.02, 0.0, 0.03])
    # an unknown spend is a gap, and the total goes on after it
    gap = _values(rows, lambda row: None if row.generation == 2
                  else float(row.value("spend_usd")), cumulative=True)
    assert gap[0] == pytest.approx(0.02) and math.isnan(gap[1])
    assert gap[2] == pytest.approx(0.05)


def test_the_y_axis_is_never_negative_for_non_negative_data() -> None:
    """A flat zero (a free model's spend) is drawn from 0, not around a negative axis;
    negative data keeps its axis (issue 41, 6)."""
    from reconciler.viewer import plots

    for values, bottom in (([0.0, 0.0, 0.0], 0.0), ([0.0, 2.5, 1.0], 0.0)):
        _figure, axes = plots._figure()
        axes.plot([1, 2, 3], values)
        plots._floor(axes)
        assert axes.get_ylim()[0] == bottom, values
    _figure, axes = plots._figure()
    axes.plot([1, 2, 3], [0.0, -1.0, 1.0])
    plots._floor(axes)
    assert axes.get_ylim()[0] < -1.0
