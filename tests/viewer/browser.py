"""Headless Debian Chromium driven by Selenium (the system chromedriver; nothing is
downloaded), and `ouro view` as a real process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.apply.helpers import REPO_ROOT, ouro_argv
from tests.history.fleet import Fleet
from tests.host import require
from tests.viewer.chromium import CHROMEDRIVER, CHROMIUM, launch
from tests.viewer.chromium import present as chromium_present


def require_browser() -> None:
    require(chromium_present(), "needs Debian's chromium and chromium-driver "
            f"({CHROMIUM}, {CHROMEDRIVER})")


def chromium(profile: Path):  # type: ignore[no-untyped-def]
    """A headless Chromium with a fresh profile, through the system chromedriver."""
    require_browser()
    return launch(profile)


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


@dataclass
class Viewer:
    url: str  # with the token
    base: str  # without
    token: str
    process: subprocess.Popen[str]

    def page(self, path: str) -> str:
        return f"{self.base}{path}"

    @property
    def address(self) -> str:
        return urllib.parse.urlsplit(self.base).hostname or ""

    @property
    def port(self) -> int:
        return urllib.parse.urlsplit(self.base).port or 0


def start_viewer(env: dict[str, str], *args: str) -> Viewer:
    process = subprocess.Popen(ouro_argv("view", *args), cwd=REPO_ROOT, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    # a random address of 127.0.0.0/8 (reconciler.viewer.server), or the --host given
    match = re.search(r"(http://127\.\d+\.\d+\.\d+:\d+)/\?token=([A-Za-z0-9_-]+)", line)
    if match is None:
        process.kill()
        _out, err = process.communicate(timeout=10)
        raise AssertionError(f"ouro view printed {line!r}; stderr: {err}")
    return Viewer(match[0], match[1], match[2], process)


def stop_viewer(viewer: Viewer) -> None:
    viewer.process.terminate()
    try:
        viewer.process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        viewer.process.kill()
        viewer.process.communicate(timeout=10)


@pytest.fixture(scope="session")
def fleet_viewer(grown_fleet: Fleet) -> Iterator[Viewer]:
    require_browser()
    viewer = start_viewer(grown_fleet.env, str(grown_fleet.specs))
    try:
        yield viewer
    finally:
        stop_viewer(viewer)


def wait_for(condition, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def css(driver: Any, selector: str) -> list[Any]:
    """The elements of the page ``selector`` finds."""
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def open_page(driver: Any, viewer: Viewer, path: str, token: bool = True) -> None:
    """Open ``path`` of the viewer (with its token unless ``token`` is false) and wait
    until the page has loaded. The page left may reload itself when heads move (the
    fleet's index does): a reload fired as this navigation starts can win the race and
    leave the browser where it was, so the navigation is made again until it arrives."""
    separator = "&" if "?" in path else "?"
    address = viewer.page(path) + (f"{separator}token={viewer.token}" if token else "")
    wanted = urllib.parse.urlsplit(address).path
    for _ in range(5):
        driver.get(address)
        assert wait_for(
            lambda: driver.execute_script("return document.readyState") == "complete")
        if urllib.parse.urlsplit(driver.current_url).path == wanted:
            return
    raise AssertionError(f"the browser stays at {driver.current_url}, not {address}")


def save_artifact(source: Path, name: str) -> None:
    folder = os.environ.get("OURO_TEST_ARTIFACTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(source, Path(folder) / name)
