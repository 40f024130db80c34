"""Headless Debian Chromium through Selenium and the system chromedriver (nothing is
downloaded). No pytest here: the benchmarks (bench/history_bench.py) launch it too,
in a venv that may lack the test runner."""

from __future__ import annotations

import os
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1000")


def present() -> bool:
    return os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)


def launch(profile: Path):  # type: ignore[no-untyped-def]
    """A headless Chromium with a fresh profile, through the system chromedriver."""
    os.environ.setdefault("SE_AVOID_STATS", "true")  # selenium-manager sends nothing
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    return driver
