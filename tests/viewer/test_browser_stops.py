"""The stops apply makes before a generation, in `ouro view` (Chromium): a replay folder with
no reply left (replay-exhausted) and a provider still down after a generation whose every
call failed (provider-unavailable). No generation records them: the viewer reads the
record apply leaves beside the lineage's lock. The lineage page and the fleet page say
which stop and why; a page already open shows a stop that came without a new generation
(the heads did not move); a generation run after it makes it go."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.apply.helpers import report, run_ouro, write_replies, write_spec
from tests.viewer.browser import Viewer, css, open_page, start_viewer, stop_viewer, wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


def _texts(driver: Any, selector: str) -> list[str]:
    """The texts of what ``selector`` finds, or [] while the page reloads under the test."""
    from selenium.common.exceptions import WebDriverException

    try:
        return [element.text for element in css(driver, selector)]
    except WebDriverException:
        return []


def _stop_cells(driver: Any) -> dict[str, str]:
    cells = {}
    for row in css(driver, "table.fleet tr.lineage"):
        tds = row.find_elements("css selector", "td")
        cells[tds[0].text] = tds[8].text
    return cells


def _heads(viewer: Viewer) -> str:
    """What the viewer's pages poll to know when to reload."""
    answer = httpx.get(f"{viewer.base}/api/heads", params={"token": viewer.token}, timeout=30)
    assert answer.status_code == 200
    return answer.text


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow  # real applies (one meets an outage and its retries), a self-reloading page
def test_stops_before_a_generation_are_shown_until_a_generation_runs(
        browser: Any, tmp_path: Path, env: dict[str, str]) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    replies = write_replies(specs / "replies", ['(message "one life")\n'])
    write_spec(specs, "spent", 3, provider="replay", replay=str(replies))
    write_spec(specs, "offline", 3, provider="openai-compatible", extra_model=(
        f"name: local-model\nbase_url: http://127.0.0.1:{_closed_port()}/v1\n"
        'api_key_env: null\nbudget_usd: "0.50"\n'
        'price: {input_usd_per_mtok: "1", output_usd_per_mtok: "2"}\n'))
    first = run_ouro("apply", "--yes", "--json", "--max-generations", "1",
                     str(specs / "spent.yaml"), env=env)
    assert report(first)["lineages"][0]["generations_run"] == 1, first.stdout + first.stderr
    viewer = start_viewer(env, str(specs))
    try:
        open_page(browser, viewer, "/lineage/spent")  # gen 1, nothing stopped: kept in memory
        assert not css(browser, "p.stopped")
        before = _heads(viewer)
        spent = run_ouro("apply", "--yes", "--json", str(specs / "spent.yaml"), env=env)
        assert spent.returncode == 1, spent.stdout + spent.stderr
        assert (report(spent)["lineages"][0]["generations_run"],
                report(spent)["lineages"][0]["stopped"]) == (0, "replay-exhausted")
        assert _heads(viewer) != before  # no head moved; what a page reloads on did
        # the open page reloads by itself and shows the stop
        assert wait_for(lambda: any("stopped before gen 2 (replay-exhausted):" in text
                                    for text in _texts(browser, "p.stopped")), timeout=30)
        [shown] = _texts(browser, "p.stopped")
        assert f"replay folder {replies} has 1 reply, all used by gen 1; generation 2 has " \
            "none: add replies to the folder" in shown
        offline = run_ouro("apply", "--yes", "--json", "--no-provider-check",
                           str(specs / "offline.yaml"), env=env)
        assert offline.returncode == 1, offline.stdout + offline.stderr
        assert (report(offline)["lineages"][0]["generations_run"],
                report(offline)["lineages"][0]["stopped"]) == (1, "provider-unavailable")
        open_page(browser, viewer, "/lineage/offline")
        [shown] = _texts(browser, "p.stopped")
        assert shown.startswith("stopped before gen 2 (provider-unavailable): every model "
                                "call of gen 1 failed (unreachable")
        assert "the provider still does not answer" in shown
        open_page(browser, viewer, "/")
        assert _stop_cells(browser) == {"offline": "before gen 2: provider-unavailable",
                                        "spent": "before gen 2: replay-exhausted"}
        (replies / "0002").write_text('(message "another life")\n')  # a reply added
        grown = run_ouro("apply", "--yes", "--json", "--max-generations", "1",
                         str(specs / "spent.yaml"), env=env)
        assert report(grown)["lineages"][0]["generations_run"] == 1
        open_page(browser, viewer, "/lineage/spent")  # gen 2 ran: the stop before it is gone
        assert css(browser, "h1")[0].text == "spent: 2 of 3 generations"
        assert not css(browser, "p.stopped")
        open_page(browser, viewer, "/")
        assert _stop_cells(browser)["spent"] == ""
    finally:
        stop_viewer(viewer)
