"""`ouro view` in Chromium: the spec's current target, a lineage not created yet, the apply
running now, two generations compared, cumulative spend, model failures marked on the
plots, and the fleet's plots."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from reconciler.state.summaries import summarize
from tests.apply.helpers import UNASKED, ouro_argv, run_ouro, write_replies, write_spec
from tests.history.fleet import Fleet
from tests.viewer.browser import Viewer, css, open_page, start_viewer, stop_viewer, wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


def _cells(driver: Any) -> dict[str, list[str]]:
    rows = css(driver, "table.fleet tr.lineage")
    return {row.find_elements("css selector", "td")[0].text:
            [td.text for td in row.find_elements("css selector", "td")] for row in rows}


def _progress(driver: Any, name: str) -> str:
    """The progress cell of a lineage, or "" while the page reloads under the test."""
    from selenium.common.exceptions import WebDriverException

    try:
        return _cells(driver).get(name, ["", ""])[1]
    except (WebDriverException, IndexError):  # a row read while its page is replaced
        return ""


def _loaded(driver: Any, images: list[Any]) -> bool:
    return all(driver.execute_script(
        "return arguments[0].complete && arguments[0].naturalWidth > 0", img) for img in images)


def _svg_ids(driver: Any, viewer: Viewer, path: str, prefix: str) -> list[str]:
    """The ids of the plot's SVG groups that start with ``prefix`` (Chromium's DOM)."""
    open_page(driver, viewer, path)
    return list(driver.execute_script(
        "return Array.from(document.querySelectorAll('g[id^=\"' + arguments[0] + '\"]'))"
        ".map(function (g) { return g.id; })", prefix))


@pytest.mark.slow  # a real apply, and a page that reloads by itself
def test_the_target_is_the_specs_and_a_new_lineage_is_not_created_yet(
        browser: Any, tmp_path: Path, grown_fleet: Fleet) -> None:
    env = {**grown_fleet.env, "OURO_STATE_DIR": str(tmp_path / "state")}
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "raised", 1)
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    write_spec(specs, "newcomer", 2)  # named by a spec, not applied
    viewer = start_viewer(env, str(specs))
    try:
        open_page(browser, viewer, "/")
        cells = _cells(browser)
        assert cells["raised"][1].startswith("1 / 1")
        assert cells["newcomer"][1] == "not created yet (0 / 2)"
        write_spec(specs, "raised", 20)  # the spec is raised while the viewer runs
        assert wait_for(lambda: _progress(browser, "raised").startswith("1 / 20"))
        open_page(browser, viewer, "/lineage/raised")
        assert css(browser, "h1")[0].text == "raised: 1 of 20 generations"
        open_page(browser, viewer, "/lineage/newcomer")
        assert css(browser, "h1")[0].text == "newcomer: not created yet"
        assert "asks for 2 generations" in css(browser, "p.not-created")[0].text
        assert not css(browser, "img.plot") and not css(browser, "table.timeline")
    finally:
        stop_viewer(viewer)
    assert not (tmp_path / "state" / "newcomer.git").exists()


@pytest.mark.slow  # a real apply, and a page that reloads by itself
def test_the_apply_running_now_is_shown_with_its_generation(
        browser: Any, tmp_path: Path, grown_fleet: Fleet) -> None:
    env = {**grown_fleet.env, "OURO_STATE_DIR": str(tmp_path / "state")}
    specs = tmp_path / "specs"
    specs.mkdir()
    # gen 1's seed asks for the first reply, which gen 2 runs: 20 s, long enough to be seen
    # running on a loaded host (the second is a reply left: no life asks for it)
    slow = write_replies(specs / "replies", ['(progn (sleep-for 20) (message "slow"))\n',
                                             UNASKED])
    write_spec(specs, "busy", 2, provider="replay", replay=str(slow))
    write_spec(specs, "idle", 1)
    assert run_ouro("apply", "--yes", str(specs / "idle.yaml"), env=env).returncode == 0
    viewer = start_viewer(env, str(specs))
    apply = subprocess.Popen(ouro_argv("apply", "--yes", str(specs / "busy.yaml")), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        open_page(browser, viewer, "/")
        # the page reloads by itself as the apply takes the lineage and grows it
        running = f"running in apply pid {apply.pid} on {socket.gethostname()}, generation 2"
        seen = wait_for(lambda: running in _progress(browser, "busy") or apply.poll() is not None,
                        timeout=90)
        assert seen and apply.poll() is None, (_progress(browser, "busy"), apply.returncode,
                                               apply.stderr.read() if apply.stderr else "")
        assert wait_for(lambda: "running" not in _progress(browser, "idle")
                        and running in _progress(browser, "busy"))
        open_page(browser, viewer, "/lineage/busy")
        if apply.poll() is None:
            assert "generation 2" in css(browser, "p.running")[0].text
        _out, err = apply.communicate(timeout=120)
        assert apply.returncode == 0, err
        open_page(browser, viewer, "/")
        assert wait_for(lambda: not css(browser, "span.running"))
        assert _cells(browser)["busy"][1].startswith("2 / 2")
    finally:
        if apply.poll() is None:
            apply.kill()
            apply.communicate()
        stop_viewer(viewer)


def test_any_two_generations_are_compared(browser: Any, fleet_viewer: Viewer,
                                          grown_fleet: Fleet) -> None:
    open_page(browser, fleet_viewer, "/lineage/story")
    [first] = css(browser, "form.diff input[name=from]")
    [second] = css(browser, "form.diff input[name=to]")
    first.clear()
    first.send_keys("1")
    second.clear()
    second.send_keys("5")
    css(browser, "form.diff button")[0].click()
    assert wait_for(lambda: "/lineage/story/diff?from=1&to=5" in browser.current_url)
    assert css(browser, "h1")[0].text == "story: gen 1 → gen 5"
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('pre.diff span'))"
        ".map(function (s) { return s.textContent; })")
    cli = run_ouro("diff", "story", "1", "5", "--specs", str(grown_fleet.specs),
                   env=grown_fleet.env)
    assert cli.returncode == 0, cli.stderr
    changed = [line for line in cli.stdout.splitlines() if line.startswith(("+", "-"))
               and not line.startswith(("+++", "---"))]
    assert changed and all(line in shown for line in changed)
    # the seed against the newest, and a generation that does not exist
    open_page(browser, fleet_viewer, "/lineage/story/diff?from=0&to=6")
    assert css(browser, "h1")[0].text == "story: gen 0 → gen 6"
    assert "the seed" in css(browser, "p.range")[0].text
    open_page(browser, fleet_viewer, "/lineage/story/diff?from=2&to=60")
    assert "has no generation 60" in css(browser, "p.error")[0].text


def test_cumulative_spend_and_model_failures_are_plotted(
        browser: Any, fleet_viewer: Viewer, grown_fleet: Fleet) -> None:
    open_page(browser, fleet_viewer, "/lineage/cut")
    plots = css(browser, "img.plot")
    assert "cumulative model spend" in [img.get_attribute("alt") for img in plots]
    assert wait_for(lambda: _loaded(browser, plots))
    rows = summarize(grown_fleet.paths("cut")).rows
    failed = [row.generation for row in rows if row.model_failure is not None]
    assert failed  # the fleet's cut lineage stopped on a model failure
    for metric in ("cumulative-spend", "spend", "cpu"):
        marks = _svg_ids(browser, fleet_viewer, f"/plot/cut/{metric}.svg", "model-failure-")
        assert marks == [f"model-failure-{number}" for number in failed], metric
    died = [row.generation for row in summarize(grown_fleet.paths("story")).rows
            if row.status == "died"]
    assert _svg_ids(browser, fleet_viewer, "/plot/story/size.svg", "death-") == [
        f"death-{number}" for number in died]


def test_the_fleet_page_plots_every_lineage(browser: Any, fleet_viewer: Viewer,
                                            grown_fleet: Fleet) -> None:
    open_page(browser, fleet_viewer, "/")
    plots = css(browser, "img.fleet-plot")
    assert [img.get_attribute("alt") for img in plots] == [
        "cumulative model spend, by lineage", "organism size, by lineage",
        "CPU time per generation, by lineage"]
    assert wait_for(lambda: _loaded(browser, plots))
    names = [row.find_elements("css selector", "td")[0].text
             for row in css(browser, "table.fleet tr.lineage")]
    lines = _svg_ids(browser, fleet_viewer, "/fleet-plot/size.svg", "lineage-")
    assert lines == [f"lineage-{index}" for index in range(len(names))]
    spending = [name for name in names
                if any(row.spend_usd is not None for row in
                       summarize(grown_fleet.paths(name)).rows)]
    assert spending
    assert len(_svg_ids(browser, fleet_viewer, "/fleet-plot/cumulative-spend.svg",
                        "lineage-")) == len(spending)
