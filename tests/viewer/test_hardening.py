"""`ouro view` against what another party on the host did: a second viewer (and any server)
on 127.0.0.1 sharing the token cookie, one generation of 1,000 files of 100 KB (a 136 MB
page, a 1.3 GB viewer), 20,000 idle connections (the token holder locked out, 169 MB of
tracebacks), an absurd value in an observation (a plot answered 500). Real viewers, a
real state dir of real repositories, Debian's Chromium; floods only to 127.0.0.1,
bounded in count and time."""

from __future__ import annotations

import json
import resource
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base import formats
from reconciler.viewer import guard, pages
from reconciler.viewer.app import cookie_name, cookie_value
from tests.observe.builder import LineageBuilder
from tests.viewer.browser import (
    Viewer,
    open_page,
    require_browser,
    start_viewer,
    stop_viewer,
    wait_for,
)

FILES, FILE_BYTES = 1000, 100_000


def _env(state: Path) -> dict[str, str]:
    import os

    return {**os.environ, "OURO_STATE_DIR": str(state)}


def _get(url: str, timeout: float = 30) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read()


def _peak_rss(viewer: Viewer) -> int:
    status = Path(f"/proc/{viewer.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


@pytest.fixture
def small_state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    builder = LineageBuilder(state, "small")
    builder.gen("changed")
    return state


@pytest.fixture
def viewers(small_state: Path) -> Iterator[list[Viewer]]:
    require_browser()
    started: list[Viewer] = []
    try:
        for _ in range(2):
            started.append(start_viewer(_env(small_state)))
        yield started
    finally:
        for viewer in started:
            stop_viewer(viewer)


def test_two_viewers_keep_their_own_httponly_strict_cookies(browser: Any,
                                                            viewers: list[Viewer]) -> None:
    first, second = viewers
    open_page(browser, first, "/")
    open_page(browser, second, "/")  # a second viewer on another port of 127.0.0.1
    open_page(browser, first, "/lineage/small", token=False)  # the cookie alone admits
    assert "403" not in browser.page_source and "small" in browser.title, browser.page_source
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script reads it
    for viewer in viewers:
        open_page(browser, viewer, "/lineage/small", token=False)
        cookies = {cookie["name"]: cookie for cookie in browser.get_cookies()}  # this host's
        cookie = cookies[cookie_name(viewer.port)]
        assert cookie["value"] == cookie_value(viewer.token, viewer.address, viewer.port)
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert first.address != second.address  # each on a random address of its own
    browser.delete_all_cookies()


class _Recorder:
    """A plain HTTP server on ``address`` that records the Cookie header of each request:
    another local server the browser visits."""

    def __init__(self, address: str) -> None:
        import http.server

        seen: list[str] = []
        self.seen = seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name for a GET
                seen.append(self.headers.get("Cookie", ""))
                body = b"<html><title>other</title>another local server</html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _visit(browser: Any, url: str) -> None:
    browser.get(url)
    assert wait_for(lambda: browser.execute_script("return document.readyState")
                    == "complete")


def test_no_other_local_server_receives_a_usable_cookie(browser: Any,
                                                        viewers: list[Viewer]) -> None:
    """Issue 36, 9: a server on another port of 127.0.0.1 that the browser visits after
    the viewer receives no cookie of it (the viewer serves on an address of its own); one
    on the viewer's own address but another port (a party that found the address) gets a
    value that is not the token and that no other viewer accepts."""
    viewer = viewers[0]
    open_page(browser, viewer, "/")
    open_page(browser, viewer, "/lineage/small", token=False)  # the cookie admits
    assert "403" not in browser.page_source
    elsewhere = _Recorder("127.0.0.1")
    beside = _Recorder(viewer.address)
    try:
        _visit(browser, elsewhere.url)
        _visit(browser, beside.url)
    finally:
        elsewhere.close()
        beside.close()
    assert elsewhere.seen and not any("ouro_view" in seen for seen in elsewhere.seen), (
        elsewhere.seen)
    received = dict(part.strip().split("=", 1) for seen in beside.seen
                    for part in seen.split(";") if "=" in part)
    value = received[cookie_name(viewer.port)]  # browsers scope cookies by host, not port
    assert value != viewer.token
    for replayed in (f"{viewer.base}/?token={value}", f"{viewers[1].base}/?token={value}"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(replayed)
        assert refused.value.code == 403
    other = urllib.request.Request(f"{viewers[1].base}/",
                                   headers={"Cookie": f"{cookie_name(viewers[1].port)}={value}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(other, timeout=30)
    assert refused.value.code == 403
    browser.delete_all_cookies()


def _huge_generation(state: Path) -> LineageBuilder:
    builder = LineageBuilder(state, "huge")
    builder.gen("changed")
    line = "x" * 99 + "\n"
    files: dict[str, bytes | None] = {
        f"junk/{index:04d}.txt": (f"{index:04d}" + line * (FILE_BYTES // 100))[:FILE_BYTES]
        .encode() for index in range(FILES)}
    builder._commit(files, formats.EXTERNAL_EDIT_SUBJECT)  # what gen 2's diff will show
    builder.gen("changed")
    return builder


def test_a_generation_of_a_thousand_large_files_is_a_bounded_page(
    browser: Any, tmp_path: Path,
) -> None:
    require_browser()
    state = tmp_path / "state"
    _huge_generation(state)
    viewer = start_viewer(_env(state))
    try:
        url = viewer.page(f"/lineage/huge/gen/2?token={viewer.token}")
        results: list[int] = []

        def fetch() -> None:
            status, body = _get(url, timeout=120)
            results.append(len(body) if status == 200 else -status)

        threads = [threading.Thread(target=fetch) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=180)
        assert len(results) == 4 and all(0 < size < 4_000_000 for size in results), results
        print(f"pages {results} bytes, viewer peak RSS {_peak_rss(viewer) >> 20} MiB")
        assert _peak_rss(viewer) < 600 << 20  # was 1.3 GB for one request, 4 GB for four
        open_page(browser, viewer, "/lineage/huge/gen/2")
        note = browser.find_element("css selector", "p.files-more")
        shown = pages.VIEW_LIMITS.files
        assert f"{shown} of {FILES + 2} files listed" in note.text, note.text  # + organism, journal
        note.find_element("css selector", "a").click()
        assert wait_for(lambda: "/raw/diff" in browser.current_url)
        raw = browser.find_element("css selector", "body").text
        assert len(raw) <= pages.RAW_CHARS + 200 and "the raw view's bound" not in raw
        assert "(cut at" in raw and "files not (wholly) shown" in raw, raw[-300:]
    finally:
        stop_viewer(viewer)


@pytest.fixture
def many_files() -> Iterator[int]:
    """Descriptors for a bounded flood (soft limit raised to the hard one, at most 8192)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 8192)
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield wanted - 256
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_flood_of_idle_and_junk_connections_locks_nobody_out(
    browser: Any, small_state: Path, many_files: int,
) -> None:
    require_browser()
    viewer = start_viewer(_env(small_state))
    address, port = viewer.address, viewer.port
    flood: list[socket.socket] = []
    started = time.monotonic()
    try:
        for index in range(min(6000, many_files)):  # bounded in count ...
            if time.monotonic() - started > 60:  # ... and in time
                break
            try:
                sock = socket.create_connection((address, port), timeout=5)
            except OSError:
                continue  # the backlog was full for a moment: the viewer sheds
            if index % 3 == 1:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            elif index % 3 == 2:
                sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")  # a warning per socket
            flood.append(sock)
        assert len(flood) > 2 * guard.MAX_CONNECTIONS
        before = time.monotonic()
        open_page(browser, viewer, "/lineage/small")  # the token holder, during the flood
        assert "small" in browser.title, browser.page_source
        assert time.monotonic() - before < 15
        status, _ = _get(f"{viewer.url}", timeout=15)
        assert status == 200
    finally:
        for sock in flood:
            sock.close()
        browser.delete_all_cookies()
        viewer.process.terminate()
        _out, err = viewer.process.communicate(timeout=30)
    assert len(err.encode()) < 16_000, err[-2000:]  # rate-limited, not a traceback per socket


def test_an_absurd_value_is_plotted_clamped_and_flagged(browser: Any, tmp_path: Path) -> None:
    require_browser()
    state = tmp_path / "state"
    builder = LineageBuilder(state, "absurd")
    builder.gen("changed", calls=[{"http_status": 200, "accounted_usd": "1e308",
                                   "usage": {"input_tokens": 10 ** 4000, "output_tokens": 7}}])
    builder.gen("changed", calls=[{"http_status": 200, "accounted_usd": "0.01",
                                   "usage": {"input_tokens": 5, "output_tokens": 7}}])
    viewer = start_viewer(_env(state))
    try:
        for metric in ("tokens", "spend"):
            status, svg = _get(viewer.page(f"/plot/absurd/{metric}.svg?token={viewer.token}"))
            assert status == 200 and svg.startswith(b"<?xml"), svg[:200]
            assert b"absurd value" in svg and b"clamped" in svg
        open_page(browser, viewer, "/lineage/absurd")
        images = browser.find_elements("css selector", "img")
        drawn = {image.get_attribute("src").rsplit("/", 1)[1].split(".")[0]:
                 browser.execute_script("return arguments[0].naturalWidth", image)
                 for image in images}
        assert drawn.get("tokens", 0) > 0 and drawn.get("spend", 0) > 0, drawn
        assert json.loads(json.dumps(drawn))  # every plot an image, none broken
    finally:
        browser.delete_all_cookies()
        stop_viewer(viewer)
