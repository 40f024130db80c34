"""`ouro compare --plot`: an SVG a browser renders and a PDF pdftoppm renders, one CI band
per cell (the SVG's groups ``ci-band-<j>``; in the PDF's raster, each cell's band colour
over an area no line's edge makes: the noise is up to 400 bytes, the bands are wide)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from tests.apply.helpers import run_ouro
from tests.host import require
from tests.viewer.browser import chromium

from .conftest import Grown

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

# matplotlib's C0 and C1 at the bands' alpha 0.2 over white, in 0..1
BANDS = {"C0": (210 / 255, 228 / 255, 240 / 255), "C1": (1.0, 229 / 255, 207 / 255)}


def plot(grown: Grown, name: str, *extra: str) -> Path:
    target = grown.state.parent / name
    result = run_ouro("compare", str(grown.spec), "--metric", "probe.size.bytes", "--plot",
                      str(target), *extra, env=grown.env)
    assert result.returncode == 0, result.stderr
    assert f"figure: {target}" in result.stdout
    return target


def band_pixels(image: np.ndarray) -> dict[str, int]:
    rgb = image[..., :3].astype(float)
    if rgb.max() > 1.0:
        rgb /= 255.0
    return {name: int((np.abs(rgb - np.array(colour)).max(axis=-1) < 0.03).sum())
            for name, colour in BANDS.items()}


def test_the_svg_renders_in_a_browser_with_one_band_per_cell(grown: Grown,
                                                             tmp_path: Path) -> None:
    svg = plot(grown, "out.svg")
    driver = chromium(tmp_path / "profile")
    try:
        driver.get(svg.as_uri())
        root = driver.execute_script("return document.documentElement.tagName")
        bands = driver.execute_script(
            "return document.querySelectorAll('g[id^=\"ci-band-\"]').length")
        means = driver.execute_script(
            "return document.querySelectorAll('g[id^=\"mean-\"]').length")
        shot = tmp_path / "shot.png"
        driver.save_screenshot(str(shot))
    finally:
        driver.quit()
    assert (root.lower(), bands, means) == ("svg", 2, 2)
    assert plot(grown, "again.svg").read_bytes() == svg.read_bytes()  # no date in it


def test_the_pdf_renders_with_pdftoppm_with_one_band_per_cell(grown: Grown,
                                                              tmp_path: Path) -> None:
    require(shutil.which("pdftoppm") is not None, "needs pdftoppm (poppler-utils)")
    pdf = plot(grown, "out.pdf")
    assert pdf.read_bytes().startswith(b"%PDF-")
    subprocess.run(["pdftoppm", "-png", "-r", "100", "-singlefile", str(pdf),
                    str(tmp_path / "page")], check=True, capture_output=True)
    counts = band_pixels(imread(tmp_path / "page.png"))
    # each band in its own colour (none drawn: 0); how wide a band is depends on the
    # replicas' random noise, so a narrow one (a few hundred pixels at 100 dpi) counts
    assert all(count > 200 for count in counts.values()), counts


def test_a_figure_format_is_its_suffix(grown: Grown) -> None:
    result = run_ouro("compare", str(grown.spec), "--plot", "out.gif", env=grown.env)
    assert result.returncode == 2 and ".svg" in result.stderr
