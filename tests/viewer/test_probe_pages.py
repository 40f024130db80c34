"""The viewer's probe plots without a browser: records a foreign writer forged on
``probes/<branch>`` (hostile probe and metric names, absurd values, more metrics than a
page shows) are escaped, bounded and drawn; what is not there is 404."""

from __future__ import annotations

import warnings
from pathlib import Path
from urllib.parse import quote

with warnings.catch_warnings():  # starlette 1.x prefers httpx2 for its test client
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from reconciler.engine.probes.records import write_record
from reconciler.spec.probes import ProbeFiles
from reconciler.viewer import pages
from reconciler.viewer.app import FleetSource, Shown, create_app
from tests.observe.builder import LineageBuilder

TOKEN = "t0ken-for-tests"
HOSTILE = "<script>window.__ouro_pwned=1</script>"
MATH = "$\\frac{1}{0}$"


def _forge(builder: LineageBuilder, name: str, digest: str,
           measured: dict[int, dict[str, object] | None]) -> None:
    for generation, metrics in measured.items():
        write_record(builder.paths, {"name": name, "digest": digest, "body": {}}, ProbeFiles(()),
                     generation, {"probe": name, "digest": digest, "generation": generation,
                                  "commit": "0" * 40, "metrics": metrics,
                                  "failure": None if metrics is not None else HOSTILE})


def _client(tmp_path: Path) -> TestClient:
    grown = LineageBuilder(tmp_path, "grown")
    for status in ("changed", "died", "changed"):
        grown.gen(status)
    many = {f"m{index:02d}": index for index in range(60)}
    _forge(grown, HOSTILE, "a" * 64, {1: {MATH: 1e300, "big": 10 ** 400, "ok": True, **many},
                                      2: None, 3: {MATH: 2, "ok": False, "text": HOSTILE}})
    other = LineageBuilder(tmp_path, "other")
    other.gen("changed")
    _forge(other, "p", "b" * 64, {1: {"ok": 3}})
    source = FleetSource(lambda: {"grown": Shown(grown.paths, 3),
                                  "other": Shown(other.paths, 1)}, fixed=True)
    return TestClient(create_app(source, TOKEN), base_url="http://127.0.0.1")


def test_forged_probe_records_are_escaped_bounded_and_drawn(tmp_path: Path) -> None:
    client = _client(tmp_path)
    page = client.get(f"/lineage/grown?token={TOKEN}").text
    assert "<script>window" not in page and "&lt;script&gt;window.__ouro_pwned=1" in page
    assert page.count('class="plot probe-plot"') == pages.PROBE_PLOTS
    # 60 + MATH + big + ok = 63 plottable columns; the string-only one is not plotted
    assert f"{63 - pages.PROBE_PLOTS} more metrics not plotted" in page
    assert "gen 2</a>: probe &lt;script&gt;" in page
    column = f"probe.{HOSTILE}.{MATH}"
    for shown in (column, f"probe.{HOSTILE}.big", f"probe.{HOSTILE}.ok"):
        plot = client.get(pages.probe_plot_src(shown, "grown"))
        assert plot.status_code == 200 and plot.content.startswith(b"<?xml"), shown
        assert b"<script" not in plot.content
        assert b'id="death-2"' in plot.content and b'id="probe-failure-2"' in plot.content
    assert b"absurd value" in client.get(pages.probe_plot_src(f"probe.{HOSTILE}.big",
                                                              "grown")).content
    for missing in (pages.probe_plot_src(f"probe.{HOSTILE}.text", "nobody"),
                    pages.probe_plot_src("probe.p.nothing", "grown"),
                    pages.probe_plot_src("probe.p.nothing")):
        assert client.get(missing).status_code == 404, missing


def test_the_fleet_page_offers_every_metric_and_overlays_the_chosen_one(
        tmp_path: Path) -> None:
    client = _client(tmp_path)
    fleet = client.get(f"/?token={TOKEN}").text
    assert "<script>window" not in fleet
    assert fleet.count("<option ") == 64  # grown's 63 plottable and other's one
    assert '<option value="probe.p.ok">' in fleet
    chosen = client.get(f"/?metric={quote('probe.p.ok')}").text
    assert '<option value="probe.p.ok" selected>' in chosen
    assert 'src="/fleet-probe-plot.svg?metric=probe.p.ok"' in chosen
    overlay = client.get(pages.probe_plot_src("probe.p.ok")).content
    assert b'id="lineage-0"' in overlay and b'id="lineage-1"' not in overlay
    both = client.get(pages.probe_plot_src(f"probe.{HOSTILE}.ok")).content
    assert b'id="lineage-0"' in both
    # a metric no lineage measured is not chosen: the first one is
    assert client.get("/?metric=probe.x.y").text.count(" selected>") == 1


def test_a_new_probe_record_reloads_the_pages(tmp_path: Path) -> None:
    """The heads a page reloads on include the probe records' branch: a back-fill shows."""
    grown = LineageBuilder(tmp_path, "grown")
    grown.gen("changed")
    grown.gen("changed")
    source = FleetSource(lambda: {"grown": Shown(grown.paths, 2)}, fixed=True)
    client = TestClient(create_app(source, TOKEN), base_url="http://127.0.0.1")
    before = client.get(f"/api/heads?token={TOKEN}").json()
    assert "probe.p.n" not in client.get("/lineage/grown").text
    _forge(grown, "p", "c" * 64, {1: {"n": 1}})
    assert client.get("/api/heads").json() != before
    assert "probe.p.n" in client.get("/lineage/grown").text  # not the page kept before
