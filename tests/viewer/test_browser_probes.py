"""`ouro view` in Chromium: each probe metric plotted over a lineage's generations (its
deaths and the probe's failures marked), one metric overlaid across the fleet (a chooser
picks which), and the ``spec.until`` stops (target-reached, plateau) on both pages.

Two real lineages grown by ``ouro apply`` with one probe, ``shape`` (the same files, so
the same digest in both): ``counted`` replays one organism that appends a definition
each life and dies in its 4th (which takes back the definition of its 3rd); the probe
fails where it finds exactly 3 definitions (gen 6), and ``until`` (at least 4
definitions) stops it after gen 7. ``still`` (the echo
provider: every generation is no-change) stops on a plateau after gen 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconciler.state import probes as stored
from reconciler.state.summaries import summarize
from reconciler.viewer.pages import probe_plot_src
from tests.apply.helpers import UNASKED, report, run_ouro, write_replies, write_spec
from tests.observe.builder import lineage_paths
from tests.viewer.browser import Viewer, css, open_page, start_viewer, stop_viewer, wait_for
from tests.viewer.test_browser_fleet import _loaded, _svg_ids

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

# Appends (defun gN () N) to itself, N the journal's entries so far; dies when it is 3.
COUNTING = """\
;;; organism.el --- counts its lives  -*- lexical-binding: t; -*-
(let ((seen (with-temp-buffer
              (insert-file-contents "/kernel/journal.md")
              (count-matches "^## gen " (point-min) (point-max))))
      (file "/work/organism.el"))
  (when (= seen 3)
    (kill-emacs 3))
  (with-temp-buffer
    (insert-file-contents file)
    (goto-char (point-max))
    (insert (format "(defun g%d () %d)\\n" seen seen))
    (write-region nil nil file)))
"""
SHAPE = """\
n=$(grep -c '^(defun g' organism.el)
if [ "$n" = 3 ]; then echo "three definitions: unlucky" >&2; exit 1; fi
grown=false; [ "$n" -gt 0 ] && grown=true
printf '{"defuns": %d, "bytes": %d, "grown": %s}' "$n" "$(wc -c < organism.el)" "$grown"
"""


def _with_probe(path: Path, until: str) -> None:
    path.write_text(path.read_text() + (
        "  probes:\n"
        "    - {name: shape, run: [/bin/sh, /probe/shape.sh], files: probes/shape,\n"
        "       ceilings: {wall: 20s, cpu: 5s, memory: 256MiB}}\n"
        f"  until:\n    - {until}\n"))


@pytest.fixture
def measured(tmp_path: Path, specs: Path, env: dict[str, str]) -> dict[str, str]:
    (specs / "probes" / "shape").mkdir(parents=True)
    (specs / "probes" / "shape" / "shape.sh").write_text(SHAPE)
    replies = write_replies(specs / "replies", [COUNTING, UNASKED])
    _with_probe(write_spec(specs, "counted", 8, provider="replay", replay=str(replies)),
                "{probe: shape, metric: defuns, at_least: 4}")
    _with_probe(write_spec(specs, "still", 6), "{probe: shape, metric: defuns, plateau: 2}")
    applied = run_ouro("apply", "--yes", "--json", "--parallel", "2", str(specs), env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    got = {r["name"]: (r["generations_run"], r["stopped"]) for r in report(applied)["lineages"]}
    assert got == {"counted": (7, "target-reached"), "still": (3, "plateau")}, got
    counted = lineage_paths(tmp_path / "state", "counted")
    assert [row.status for row in summarize(counted).rows] == [
        "changed", "changed", "changed", "died", "changed", "changed", "changed"]
    assert stored.table(counted).failures == {"shape": {6: "exit status 1"}}
    return env


@pytest.mark.slow  # two real lineages grown and measured
def test_probe_metrics_are_plotted_with_deaths_failures_and_until_stops(
        browser: Any, measured: dict[str, str], specs: Path) -> None:
    viewer = start_viewer(measured, str(specs))
    browser.set_page_load_timeout(120)  # a page waits for its plots: slow on a loaded host
    try:
        _lineage_page(browser, viewer)
        _fleet_page(browser, viewer)
    finally:
        browser.set_page_load_timeout(30)
        stop_viewer(viewer)


def _lineage_page(browser: Any, viewer: Viewer) -> None:
    open_page(browser, viewer, "/lineage/counted")
    assert css(browser, "h1")[0].text == "counted: 7 generations, done (target-reached)"
    until = css(browser, "p.stopped.until")[0].text
    assert until.startswith("done after gen 7 (target-reached): gen 7 measured "
                            "shape.defuns = 4, at least 4"), until
    plots = css(browser, "img.probe-plot")
    assert [img.get_attribute("alt") for img in plots] == [
        "probe.shape.bytes", "probe.shape.defuns", "probe.shape.grown"]
    assert wait_for(lambda: _loaded(browser, plots))
    # each failure's first line (its stderr's end follows in a <pre>, when it wrote any)
    assert [li.text.split("\n")[0] for li in css(browser, "ul.probe-failures li")] == [
        "gen 6: probe shape failed: exit status 1"]
    for column in ("probe.shape.defuns", "probe.shape.grown"):
        path = probe_plot_src(column, "counted")
        assert _svg_ids(browser, viewer, path, "death-") == ["death-4"], column
        assert _svg_ids(browser, viewer, path, "probe-failure-") == ["probe-failure-6"]
        assert _svg_ids(browser, viewer, path, "probe-metric") == ["probe-metric"]
    open_page(browser, viewer, "/lineage/still")
    assert css(browser, "p.stopped.until")[0].text.startswith(
        "done after gen 3 (plateau): shape.defuns has had no new best in 2")
    assert not css(browser, "ul.probe-failures")
    open_page(browser, viewer, probe_plot_src("probe.shape.nothing", "still"))
    assert "404" in browser.find_element("tag name", "body").text


def _fleet_page(browser: Any, viewer: Viewer) -> None:
    from selenium.webdriver.support.ui import Select

    open_page(browser, viewer, "/")
    stops = {row.find_elements("css selector", "td")[0].text:
             row.find_elements("css selector", "td.stop span.until")[0].text
             for row in css(browser, "table.fleet tr.lineage")}
    assert stops == {"counted": "after gen 7: target-reached",
                     "still": "after gen 3: plateau"}
    # done by its target is done (issue 41, 6): not "7 / 8" with a partial bar
    progress = {row.find_elements("css selector", "td")[0].text:
                row.find_elements("css selector", "td.progress")[0]
                for row in css(browser, "table.fleet tr.lineage")}
    assert progress["counted"].text == "7 done (target-reached)", progress["counted"].text
    assert progress["still"].text == "3 done (plateau)", progress["still"].text
    for cell in progress.values():
        bar = cell.find_elements("css selector", "progress")[0]
        assert bar.get_attribute("value") == bar.get_attribute("max")
    chooser = Select(css(browser, "form.probe-metric select")[0])
    assert [option.text for option in chooser.options] == [
        "probe.shape.bytes", "probe.shape.defuns", "probe.shape.grown"]
    assert chooser.first_selected_option.text == "probe.shape.bytes"
    chooser.select_by_visible_text("probe.shape.defuns")
    css(browser, "form.probe-metric button")[0].click()
    assert wait_for(lambda: "metric=probe.shape.defuns" in browser.current_url)
    [overlay] = css(browser, "img.fleet-probe-plot")
    assert overlay.get_attribute("src").endswith(probe_plot_src("probe.shape.defuns"))
    assert wait_for(lambda: _loaded(browser, [overlay]))
    assert Select(css(browser, "form.probe-metric select")[0]) \
        .first_selected_option.text == "probe.shape.defuns"
    assert _svg_ids(browser, viewer, probe_plot_src("probe.shape.defuns"),
                    "lineage-") == ["lineage-0", "lineage-1"]
