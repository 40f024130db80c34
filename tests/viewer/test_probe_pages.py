"""The viewer's probe plots without a browser: records a foreign writer forged on
``probes/<branch>`` are escaped, bounded and drawn when ouro's writer could have written
them (hostile text in a failure or a string metric, absurd values, more metrics than a
page shows), and not shown at all when it could not (a hostile probe or metric name, an
integer past 64 bits: ``state.probe_rules``, issue 36); what is not there is 404."""

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
    _forge(grown, "hostile", "a" * 64, {1: {"big": 1e300, "ok": True, **many},
                                        2: None, 3: {"ok": False, "text": HOSTILE}})
    # what ouro's writer never writes: believed by no reader, so not on any page
    _forge(grown, HOSTILE, "d" * 64, {1: {MATH: 1}, 3: {"huge": 10 ** 400}})
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
    # 60 + big + ok = 62 plottable columns; the string-only one is not plotted
    assert f"{62 - pages.PROBE_PLOTS} more metrics not plotted" in page
    assert "gen 2</a>: probe hostile" in page
    assert "frac" not in page and "huge" not in page  # the forged records: not shown
    for shown in ("probe.hostile.big", "probe.hostile.ok"):
        plot = client.get(pages.probe_plot_src(shown, "grown"))
        assert plot.status_code == 200 and plot.content.startswith(b"<?xml"), shown
        assert b"<script" not in plot.content
        assert b'id="death-2"' in plot.content and b'id="probe-failure-2"' in plot.content
    assert b"absurd value" in client.get(pages.probe_plot_src("probe.hostile.big",
                                                              "grown")).content
    for missing in (pages.probe_plot_src(f"probe.{HOSTILE}.{MATH}", "grown"),
                    pages.probe_plot_src("probe.hostile.text", "nobody"),
                    pages.probe_plot_src("probe.p.nothing", "grown"),
                    pages.probe_plot_src("probe.p.nothing")):
        assert client.get(missing).status_code == 404, missing


def test_the_fleet_page_offers_every_metric_and_overlays_the_chosen_one(
        tmp_path: Path) -> None:
    client = _client(tmp_path)
    fleet = client.get(f"/?token={TOKEN}").text
    assert "<script>window" not in fleet
    assert fleet.count("<option ") == 63  # grown's 62 plottable and other's one
    assert '<option value="probe.p.ok">' in fleet
    chosen = client.get(f"/?metric={quote('probe.p.ok')}").text
    assert '<option value="probe.p.ok" selected>' in chosen
    assert 'src="/fleet-probe-plot.svg?metric=probe.p.ok"' in chosen
    overlay = client.get(pages.probe_plot_src("probe.p.ok")).content
    assert b'id="lineage-0"' in overlay and b'id="lineage-1"' not in overlay
    both = client.get(pages.probe_plot_src("probe.hostile.ok")).content
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
