"""The lineage page shows the verdict `ouro reproduce` kept (real lineages, a real
reproduction: bubblewrap, cgroups, Emacs, git): "reproduced N of N generations", or the
first divergence with the differing path, escaped (the organism names the path: here it
holds ``<script>``); that the lineage has grown since; nothing but a quiet line before."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette 1.x prefers httpx2 for its test client
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from reconciler.viewer.app import create_app
from reconciler.viewer.server import make_source
from tests.apply.helpers import run_ouro
from tests.reproduce.helpers import CLOCK_BODY, grow
from tests.viewer.browser import css, open_page, start_viewer, stop_viewer

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]
TOKEN = "t0ken-for-tests"
HOSTILE = "<script>alert(1)<"  # a file name the organism chooses (no '/')


def _page(state: Path, name: str) -> str:
    client = TestClient(create_app(make_source([], state), TOKEN),
                        base_url="http://127.0.0.1")
    response = client.get(f"/lineage/{name}?token={TOKEN}")
    assert response.status_code == 200
    return re.sub(r"\s+", " ", response.text)


def test_the_lineage_page_shows_the_kept_verdict(specs: Path, env: dict[str, str],
                                                 tmp_path: Path) -> None:
    state = tmp_path / "state"
    grow(specs, env, "steady", 2, [";; steady\n"])
    clock = grow(specs, env, "clock", 2, [CLOCK_BODY.replace("now.txt", HOSTILE)])
    before = _page(state, "steady")
    assert "Not reproduced yet: <code>ouro reproduce steady</code>" in before
    assert "reproduction-verdict" not in before
    for name, code in (("steady", 0), ("clock", 1)):
        done = run_ouro("reproduce", name, env=env)
        assert done.returncode == code, done.stdout + done.stderr

    steady = _page(state, "steady")
    assert "<strong>reproduction:</strong> reproduced 2 of 2 generations" in steady
    assert re.search(r'class="ran-at">\(run 20\d\d-\d\d-\d\dT[0-9:]+\+00:00\)', steady)
    assert "Not reproduced yet" not in steady and "reproduction-stale" not in steady

    page = _page(state, "clock")
    assert ('<a href="/lineage/clock/gen/2">diverged at generation 2 (tree): reproduced 1 of 2'
            " generations before it</a>") in page
    assert "modified: <code>&lt;script&gt;alert(1)&lt;</code>" in page
    assert "<script>alert" not in page  # escaped everywhere, the diff's lines too
    assert "--- recorded/&lt;script&gt;alert(1)&lt;" in page
    assert "reproduction-stale" not in page

    clock.write_text(clock.read_text().replace("generations: 2", "generations: 3"))
    done = run_ouro("apply", "-y", "--no-probe", str(clock), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    grown = _page(state, "clock")
    assert "diverged at generation 2" in grown  # still the last verdict kept
    assert ('class="cut reproduction-stale">The lineage has grown or moved since: this verdict'
            " is about an older head") in grown


def test_in_chromium_the_hostile_path_is_text_and_no_script_runs(
        browser: Any, specs: Path, env: dict[str, str]) -> None:
    grow(specs, env, "clock", 2, [CLOCK_BODY.replace("now.txt", HOSTILE)])
    assert run_ouro("reproduce", "clock", env=env).returncode == 1
    viewer = start_viewer(env)
    try:
        open_page(browser, viewer, "/lineage/clock")
        verdict = css(browser, ".reproduction-verdict")
        assert verdict and "diverged at generation 2 (tree)" in verdict[0].text
        paths = [element.text for element in css(browser, ".reproduction-differences code")]
        assert paths == [HOSTILE]  # shown as the text it is
        assert not [e for e in css(browser, "script")
                    if not (e.get_attribute("src") or "").endswith("/static/refresh.js")]
    finally:
        stop_viewer(viewer)
