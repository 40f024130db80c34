"""`ouro view` in a real headless Chromium: pages, plots, hostile text, the token."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.apply.helpers import REPO_ROOT, run_ouro, write_spec
from tests.history.fleet import (
    FORGED_FINGERPRINT,
    FORGED_KERNEL,
    FORGED_MESSAGE,
    FORGED_STOP,
    FORGED_VERSION,
    HOSTILE_DETAIL,
    HOSTILE_NAMES,
    HOSTILE_STDERR,
    HOSTILE_STOP,
    Fleet,
)
from tests.viewer.browser import (
    Viewer,
    chromium,
    css,
    open_page,
    save_artifact,
    start_viewer,
    stop_viewer,
    wait_for,
)

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


def test_the_fleet_page_lists_the_lineages(browser: Any, fleet_viewer: Viewer) -> None:
    open_page(browser, fleet_viewer, "/")
    rows = css(browser, "table.fleet tr.lineage")
    names = [row.find_elements("css selector", "td")[0].text for row in rows]
    assert names == ["cut", "scribe", "quiet", "hostile", "story"]  # spec files in name order
    cells = {row.find_elements("css selector", "td")[0].text:
             [td.text for td in row.find_elements("css selector", "td")] for row in rows}
    assert cells["story"][1].startswith("6 / 6") and cells["story"][4] == "1"
    assert cells["scribe"][1].startswith("5 / 5")
    assert cells["story"][5] == "1"  # one model failure
    assert cells["cut"][8] == "after gen 3: auth"  # the final 401 stopped it
    assert cells["hostile"][8] == "1 under another kernel"  # the foreign write
    assert cells["story"][8] == "1 failed in a row"  # replays exhausted: not yet K of them


def test_a_generation_page_shows_its_kernel_and_a_truncated_reply(
        browser: Any, fleet_viewer: Viewer, grown_fleet: Fleet, tmp_path: Path) -> None:
    import json

    born = json.loads((grown_fleet.state / "cut.observations" / "metadata.json").read_text())
    open_page(browser, fleet_viewer, "/lineage/cut/gen/1")
    [commit] = css(browser, "code.kernel-commit")
    assert commit.text == born["instrument_commit"][:12]
    assert commit.get_attribute("title") == born["instrument_commit"]
    assert css(browser, "code.kernel-fingerprint")[0].text == born["instrument_fingerprint"]
    assert css(browser, "dd.kernel-source")[0].text == "running"
    assert "GNU Emacs" in css(browser, "dd.versions")[0].text
    assert not css(browser, "dd.foreign")
    [stop] = css(browser, "code.stop-reason")
    assert stop.text == "max_tokens"
    [cut] = css(browser, "strong.truncated")
    assert cut.is_displayed() and cut.text == "TRUNCATED"
    shot = tmp_path / "truncated-cut-1.png"
    browser.save_screenshot(str(shot))
    save_artifact(shot, shot.name)
    open_page(browser, fleet_viewer, "/lineage/cut")
    assert "stopped after gen 3 (auth)" in css(browser, "p.stopped")[0].text
    assert "fingerprint " + born["instrument_fingerprint"] in css(browser, "dd.born")[0].text


def test_a_lineage_page_shows_every_generation(browser: Any, fleet_viewer: Viewer,
                                               tmp_path: Path) -> None:
    open_page(browser, fleet_viewer, "/lineage/story")
    rows = css(browser, "table.timeline tr.generation")
    assert [row.find_elements("css selector", "td")[0].text for row in rows] == [
        "1", "2", "3", "4", "5", "6"]
    assert "died" in rows[3].get_attribute("class")
    assert "✎1" in rows[3].text  # the external edit before gen 4
    plots = css(browser, "img.plot")
    # tokens, cpu, memory, size: story's model spent nothing, so no spend plot leads
    assert [img.get_attribute("src").rsplit("/", 1)[1] for img in plots] == [
        "tokens.svg", "cpu.svg", "memory.svg", "size.svg"]
    assert css(browser, "p.no-spend")
    assert wait_for(lambda: all(browser.execute_script(
        "return arguments[0].complete && arguments[0].naturalWidth > 0", img) for img in plots))
    shot = tmp_path / "lineage-story.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    save_artifact(shot, shot.name)


def test_plots_are_drawn_svg(fleet_viewer: Viewer) -> None:
    for metric in ("spend", "cumulative-spend", "tokens", "cpu", "memory", "size"):
        request = urllib.request.Request(
            fleet_viewer.page(f"/plot/story/{metric}.svg?token={fleet_viewer.token}"))
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
            assert response.headers["Content-Type"] == "image/svg+xml"
        assert body.lstrip().startswith(b"<?xml") and b"<svg" in body
        assert body.count(b"<path") > 5  # axes, ticks and the data line


def test_a_death_page_shows_the_lethal_body(browser: Any, fleet_viewer: Viewer,
                                            tmp_path: Path) -> None:
    open_page(browser, fleet_viewer, "/lineage/story/gen/4")
    lethal = (REPO_ROOT / "specs" / "replies" / "scribe" / "0003").read_text()
    [body] = css(browser, "pre.lethal")
    shown = browser.execute_script("return arguments[0].textContent", body)
    assert shown == lethal
    [stderr] = css(browser, "pre.stderr")
    assert "void-function scribe-consolidate-memory" in stderr.text
    assert "exit 255" in css(browser, "pre.journal")[0].text
    shot = tmp_path / "death-story-4.png"
    browser.save_screenshot(str(shot))
    save_artifact(shot, shot.name)


@pytest.mark.parametrize("path", ["/", "/lineage/hostile", "/lineage/hostile/gen/1",
                                  "/lineage/hostile/gen/2", "/lineage/hostile/gen/3",
                                  "/lineage/cut", "/lineage/cut/gen/2", "/lineage/cut/gen/3"])
def test_hostile_text_executes_nothing(browser: Any, fleet_viewer: Viewer, path: str) -> None:
    open_page(browser, fleet_viewer, path)
    assert browser.execute_script("return document.documentElement.dataset.ouroLive") == "1"
    assert browser.execute_script("return typeof window.__ouro_pwned") == "undefined"
    assert not css(browser, "img:not(.plot)")
    assert not css(browser, "a[href^='javascript']")
    assert not [e for e in css(browser, "script")
                if not (e.get_attribute("src") or "").endswith("/static/refresh.js")]
    text = browser.execute_script("return document.body.textContent")
    if path.endswith("hostile/gen/2"):  # the generation that wrote the hostile files
        for name in HOSTILE_NAMES:
            assert name in text
    if path.endswith("hostile/gen/3"):  # the death that printed hostile text
        for line in HOSTILE_STDERR:
            assert line in text
    if path.endswith("hostile/gen/1"):  # the foreign write: ran_with, failure, stop reason
        for forged in (FORGED_FINGERPRINT, FORGED_VERSION, FORGED_MESSAGE, FORGED_STOP,
                       FORGED_KERNEL[:12]):
            assert forged in text, forged
        assert "differs from the one its lineage was born under" in text
    if path.endswith("cut/gen/2"):  # a provider's stop reason
        assert HOSTILE_STOP in text
    if path.endswith("cut/gen/3"):  # a provider's error text
        assert HOSTILE_DETAIL in text


@pytest.mark.parametrize("token", [None, "wrong", ""], ids=["none", "wrong", "empty"])
def test_without_the_token_403(fleet_viewer: Viewer, token: str | None) -> None:
    for path in ("/", "/lineage/story", "/static/refresh.js", "/api/heads",
                 "/plot/story/cpu.svg"):
        query = f"?token={token}" if token is not None else ""
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(fleet_viewer.page(path + query), timeout=10)
        assert caught.value.code == 403


def test_the_browser_without_the_token_is_refused(fleet_viewer: Viewer, tmp_path: Path) -> None:
    driver = chromium(tmp_path / "profile")
    try:
        driver.get(fleet_viewer.page("/lineage/story"))
        assert "403" in driver.find_element("tag name", "body").text
        assert not css(driver, "table")
    finally:
        driver.quit()


def test_a_foreign_host_header_is_refused(fleet_viewer: Viewer) -> None:
    request = urllib.request.Request(fleet_viewer.url, headers={"Host": "evil.example:80"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 400


def test_unknown_pages_are_404_not_tracebacks(fleet_viewer: Viewer) -> None:
    for path in ("/lineage/nobody", "/lineage/story/gen/99", "/plot/story/nothing.svg",
                 "/nowhere"):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(fleet_viewer.page(f"{path}?token={fleet_viewer.token}"),
                                   timeout=10)
        assert caught.value.code == 404


@pytest.mark.slow  # two real applies, and a page that reloads by itself
def test_the_page_follows_a_running_apply(browser: Any, tmp_path: Path,
                                          grown_fleet: Fleet) -> None:
    env = {**grown_fleet.env, "OURO_STATE_DIR": str(tmp_path / "state")}
    specs = tmp_path / "specs"
    specs.mkdir()
    spec = write_spec(specs, "grower", 1)
    assert run_ouro("apply", "--yes", str(spec), env=env).returncode == 0
    viewer = start_viewer(env)  # no specs: the state dir's lineages, re-read on each page
    try:
        open_page(browser, viewer, "/lineage/grower")
        assert len(css(browser, "table.timeline tr.generation")) == 1
        write_spec(specs, "grower", 3)
        assert run_ouro("apply", "--yes", str(spec), env=env).returncode == 0
        assert wait_for(lambda: len(css(browser, "table.timeline tr.generation")) == 3)
    finally:
        stop_viewer(viewer)
