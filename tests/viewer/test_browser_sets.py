"""The set page in Chromium: linked from the fleet page, one metric of every member
overlaid (organism size, spend, survival, a probe's metric), each cell's n, mean and 95%
CI (``reconciler.report.statistics``, as `ouro compare`) and the pairs of cells,
orphans drawn and marked but left out of the mean (real lineages in docs/lineage-contract.md's
formats written with pygit2, real probe records, a real `ouro view`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reconciler.engine.probes.records import write_record
from reconciler.spec.load import load_specs
from reconciler.spec.probes import ProbeFiles
from tests.observe.builder import LineageBuilder
from tests.viewer.browser import (
    css,
    open_page,
    save_artifact,
    start_viewer,
    stop_viewer,
    wait_for,
)

SET = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {{name: trial}}
spec:
  replicas: {replicas}
  matrix:
    model: [{{provider: echo}}, {{provider: echo, name: other}}]
  template: {{generations: 3}}
"""
PROBE = {"name": "score", "digest": "ab" * 32, "body": {"run": ["true"]}}
# cell -> replica -> (the generations that die, the probe's value)
GROWN = {0: {0: ((), 1), 1: ((2,), 3), 2: ((1, 2, 3), 1000)},
         1: {0: ((), 10), 1: ((3,), 20), 2: ((), 1000)}}


def _grow(tmp_path: Path) -> tuple[dict[str, str], Path, list[list[str]]]:
    """Three replicas in each of two cells, 3 generations each, a probe's value at every
    generation; then the spec lowered to two replicas (each cell's third is orphaned)."""
    state = tmp_path / "state"
    state.mkdir()
    spec = tmp_path / "set.yaml"
    spec.write_text(SET.format(replicas=3))
    names: list[list[str]] = [[], []]
    for loaded in load_specs([spec], state_dir=state):
        member = loaded.member
        assert member is not None
        cell = 0 if len(names[0]) < 3 else 1  # the members come cell by cell
        names[cell].append(loaded.name)
        deaths, value = GROWN[cell][member.replica]
        builder = LineageBuilder(state, loaded.name)
        for n in (1, 2, 3):
            commit = builder.gen("died" if n in deaths else "changed")
            write_record(builder.paths, PROBE, ProbeFiles(()), n, {
                "probe": "score", "digest": PROBE["digest"], "generation": n,
                "commit": commit, "metrics": {"value": value, "ok": True}})
    spec.write_text(SET.format(replicas=2))
    return {**os.environ, "OURO_STATE_DIR": str(state)}, spec, names


def _cells(driver: Any) -> list[list[str]]:
    """Each cell's name, matrix, members, n and mean."""
    return [[tds[0].text, tds[1].text, tds[2].text, tds[4].text, tds[5].text]
            for row in css(driver, "table.cells tr.cell")
            if (tds := row.find_elements("css selector", "td"))]


def _choose(driver: Any, metric: str) -> None:
    links = [a for a in css(driver, "nav.metrics a") if a.get_attribute("data-metric") == metric]
    assert len(links) == 1, [a.get_attribute("data-metric") for a in css(driver, "nav.metrics a")]
    links[0].click()
    assert wait_for(lambda: any(a.get_attribute("data-metric") == metric
                                for a in css(driver, "nav.metrics a.current")))


def _loaded(driver: Any) -> bool:
    return all(driver.execute_script(
        "return arguments[0].complete && arguments[0].naturalWidth > 0", img)
        for img in css(driver, "img.set-plot"))


def _no_metric_link_wraps(browser: Any, viewer: Any, tmp_path: Path) -> None:
    """At 1,400 px (issue 41, 6) and at 700, each metric link is one line box: a label
    never wraps mid-way (the links wrap between labels)."""
    try:
        for width in (1400, 700):
            browser.set_window_size(width, 1000)
            open_page(browser, viewer, "/set/trial?metric=probe.score.value")
            boxes = browser.execute_script(
                "return Array.from(document.querySelectorAll('nav.metrics a'))"
                ".map(a => [a.textContent, a.getClientRects().length])")
            assert boxes and all(count == 1 for _text, count in boxes), (width, boxes)
            shot = tmp_path / f"set-page-{width}.png"
            assert browser.save_screenshot(str(shot))
            save_artifact(shot, shot.name)
    finally:
        browser.set_window_size(1280, 1000)


def test_the_set_page_overlays_members_with_each_cells_mean_and_spread(
        browser: Any, tmp_path: Path) -> None:
    env, spec, names = _grow(tmp_path)
    viewer = start_viewer(env, str(spec))
    try:
        open_page(browser, viewer, "/")
        (entry,) = css(browser, "ul.sets li.set")
        assert entry.text == "set trial: 4 members in 2 cells, 2 orphaned"
        marked = [row.find_elements("css selector", "td")[0].text
                  for row in css(browser, "table.fleet tr.lineage")]
        assert [text for text in marked if text.endswith(" orphaned")] == [
            f"{names[0][2]} orphaned", f"{names[1][2]} orphaned"]
        entry.find_element("css selector", "a").click()
        assert wait_for(lambda: css(browser, "h1") and css(browser, "h1")[0].text
                        == "Set trial: 4 members in 2 cells, 2 orphaned")
        assert wait_for(lambda: _loaded(browser))
        assert [a.get_attribute("data-metric") for a in css(browser, "nav.metrics a")] == [
            "size", "spend", "survival", "probe.score.ok", "probe.score.value"]
        _choose(browser, "survival")  # cell 0: 3/3 and 2/3 survived; cell 1: 3/3, 2/3
        cells = _cells(browser)
        assert [row[2:] for row in cells] == [["2", "2", "0.8333"]] * 2
        assert [row[1] for row in cells] == ['model={"provider":"echo"}',
                                             'model={"name":"other","provider":"echo"}']
        _choose(browser, "probe.score.value")  # the orphans' 1000 stays out of the mean
        assert [row[2:] for row in _cells(browser)] == [["2", "2", "2"], ["2", "2", "15"]]
        (pair,) = css(browser, "table.pairs tr.pair")
        assert [td.text for td in pair.find_elements("css selector", "td")][2] == "-13"
        assert "Survivor rule" in css(browser, "p.rule")[0].text
        assert wait_for(lambda: _loaded(browser))
        shot = tmp_path / "set-page.png"
        assert browser.save_screenshot(str(shot))
        save_artifact(shot, shot.name)
        _no_metric_link_wraps(browser, viewer, tmp_path)
        orphans = [span.find_element("css selector", "a").text
                   for span in css(browser, "span.member.orphaned")]
        assert orphans == [names[0][2], names[1][2]]
        assert wait_for(lambda: _loaded(browser))
        src = css(browser, "img.set-plot")[0].get_attribute("src")
        browser.get(src)
        ids = browser.execute_script(
            "return Array.from(document.querySelectorAll('g[id]')).map(g => g.id)"
            ".filter(id => /^(member|cell-mean|cell-ci)-/.test(id))")
        assert sorted(ids) == sorted([f"member-{i}" for i in range(6)]
                                     + ["cell-mean-0", "cell-mean-1",
                                        "cell-ci-0", "cell-ci-1"])
        open_page(browser, viewer, "/set/trial?metric=probe.score.value")
        link = next(a for a in css(browser, "td.members a") if a.text == names[1][1])
        link.click()
        assert wait_for(lambda: browser.current_url.endswith(f"/lineage/{names[1][1]}"))
        open_page(browser, viewer, "/set/trial?metric=probe.nothing.here")
        assert "no such set here, or no such metric" in browser.page_source
        open_page(browser, viewer, "/set/nosuch")
        assert "no such set here" in browser.page_source
    finally:
        stop_viewer(viewer)
