"""A selected set's page in Chromium (issue 39, "Seen"): its epochs, each decision as
its record wrote it (kept, stopped, born of whom at which generation), the fitness over
epochs (best, mean, 95% CI) drawn and tabled, the family tree across epochs with the
stopped members marked, and the MAP-Elites grid. Over real populations grown by a real
`ouro apply`; the expected numbers are computed here from the probe records themselves."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from reconciler.engine.epochs import read_record
from reconciler.spec.load import default_places
from reconciler.state import probes as stored
from tests.apply.helpers import run_ouro, write_replies
from tests.selection.test_population import POP, _write
from tests.selection.test_seeded import BODIES, ELITES, SIZE
from tests.viewer.browser import css, open_page, save_artifact, start_viewer, stop_viewer, wait_for

SMALL = POP.replace("replicas: 8", "replicas: 4").replace("keep: 4", "keep: 2") \
    .replace("epochs: 3", "epochs: 2")


def _grow(root: Path, text: str, replies: bool = False) -> tuple[dict[str, str], Path]:
    specs = root / "specs"
    specs.mkdir(parents=True)
    _write(specs, text)
    if replies:
        (specs / "probes" / "score" / "score.sh").write_text(SIZE)
        for cell, size in BODIES.items():
            body = f";; cell {cell}\n"
            write_replies(specs / "replies" / cell,
                          [body + ";" * (size - len(body) - 1) + "\n"] * 8)
    env = {**os.environ, "OURO_STATE_DIR": str(root / "state")}
    applied = run_ouro("apply", "--yes", str(specs), env=env, timeout=600)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    return env, specs


def _value(state: Path, name: str, generation: int) -> float:
    (found,) = [r for r in stored.records(default_places(state / name, name))
                if r.generation == generation]
    return float(found.record["metrics"]["value"])


def _cells(driver: Any, selector: str) -> list[list[str]]:
    return [[td.text for td in row.find_elements("css selector", "td")]
            for row in css(driver, selector)]


def test_a_selected_sets_page_shows_its_epochs_fitness_and_family(
        browser: Any, tmp_path: Path) -> None:
    env, specs = _grow(tmp_path, SMALL)
    state = tmp_path / "state"
    record = read_record(default_places(state / "pop-0", "pop-0"), "pop", 1)
    assert record is not None
    born = {b["name"]: (b["parent"], b["generation"]) for b in record["born"]}
    # each epoch's values from the probe records: epoch 1 at gen 2 of the set's own
    # members, epoch 2 at gen 4 of the kept and gen 2 of the born
    first = [_value(state, f"pop-{i}", 2) for i in range(4)]
    second = [_value(state, name, 4) for name in record["kept"]] + [
        _value(state, name, 2) for name in born]
    viewer = start_viewer(env, str(specs))
    try:
        open_page(browser, viewer, "/set/pop")
        assert wait_for(lambda: css(browser, "section.selection h2"))
        assert css(browser, "section.selection h2")[0].text == "Selection: epoch 2 of 2"
        rows = _cells(browser, "table.epochs tr.epoch")
        assert [row[:4] for row in rows] == [
            ["1", "4", f"{max(first):.4g}", f"{statistics.mean(first):.4g}"],
            ["2", "4", f"{max(second):.4g}", f"{statistics.mean(second):.4g}"]]
        low, high = (float(x) for x in rows[0][4].strip("[]").split(", "))
        assert low <= statistics.mean(first) <= high
        assert rows[0][5].split(", ") == record["kept"]
        assert rows[0][6].split(", ") == record["stopped"]
        shown = {span.text.split(" from ")[0]: (span.get_attribute("data-parent"),
                                                int(span.get_attribute("data-generation")))
                 for span in css(browser, "td.born span.born-member")}
        assert shown == born
        assert rows[1][5] == "the last epoch: no decision"
        # the family tree: the set's own members are the roots, the born under their parent
        for name, (parent, _generation) in born.items():
            (node,) = [n for n in css(browser, "li.node")
                       if n.get_attribute("data-member") == name]
            owner = node.find_element("xpath", "ancestor::li[1]")
            assert owner.get_attribute("data-member") == parent
        stopped = sorted(n.get_attribute("data-member") for n in css(browser, "li.node.stopped"))
        assert stopped == sorted(record["stopped"])
        assert wait_for(lambda: browser.execute_script(
            "const i = document.querySelector('img.fitness-plot');"
            "return i.complete && i.naturalWidth > 0"))
        shot = tmp_path / "set-selection.png"
        assert browser.save_screenshot(str(shot))
        save_artifact(shot, shot.name)
        svg = browser.execute_script(
            "const r = new XMLHttpRequest(); r.open('GET', arguments[0], false); r.send();"
            "return r.responseText", "/set-fitness/pop.svg")
        for group in ("fitness-best", "fitness-mean", "fitness-ci"):
            assert f'id="{group}' in svg, group
    finally:
        stop_viewer(viewer)


def test_a_map_elites_set_shows_its_grid_and_a_set_without_selection_none(
        browser: Any, tmp_path: Path) -> None:
    env, specs = _grow(tmp_path / "elites", ELITES.replace("SEED", "7"), replies=True)
    viewer = start_viewer(env, str(specs))
    try:
        open_page(browser, viewer, "/set/pop")
        assert wait_for(lambda: css(browser, "table.grid tr.bin"))
        grid = _cells(browser, "table.grid tr.bin")
        # bins 0, 1, 2 (edges 300 and 600) hold the cells' 200, 400, 800 bytes
        assert [(where, float(value)) for where, _elite, value in grid] == [
            ("0", 200.0), ("1", 400.0), ("2", 800.0)]
        state = tmp_path / "elites" / "state"
        record = read_record(default_places(state / grid[0][1], grid[0][1]), "pop", 1)
        assert record is not None and sorted(e for _w, e, _v in grid) == sorted(record["kept"])
    finally:
        stop_viewer(viewer)
    plain = tmp_path / "plain"
    env, specs = _grow(plain, SMALL.replace("  selection: {every: 2, epochs: 2, by: "
                                            "probe.score.value, method: truncation, keep: 2,\n"
                                            "              seed: 7}\n", ""))
    viewer = start_viewer(env, str(specs))
    try:
        open_page(browser, viewer, "/set/pop")
        assert wait_for(lambda: css(browser, "table.cells"))
        assert css(browser, "section.selection") == []
    finally:
        stop_viewer(viewer)
