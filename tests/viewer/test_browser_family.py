"""The family-tree page in a real headless Chromium: real forks (a fork, its sibling, a fork
of a fork) as a tree, each node linking to its lineage and to the parent's generation it
forked from; a parent the viewer does not show is named, not lost."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.apply.helpers import run_ouro
from tests.forks.helpers import Family, fork_spec, grow_family
from tests.viewer.browser import css, open_page, start_viewer, stop_viewer, wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


def _family(root: Path) -> Family:
    family = grow_family(root)
    child = fork_spec(family.specs, "child", "scribe", 2)
    sibling = fork_spec(family.specs, "sibling", "scribe", 1, kernel="parent")
    applied = run_ouro("apply", "-y", str(child), str(sibling), env=family.env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    grand = fork_spec(family.specs, "grandchild", "child", 1)
    applied = run_ouro("apply", "-y", str(child), str(grand), env=family.env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    return family


def _points(browser: Any, viewer: Any, path: str) -> dict[str, list[float]]:
    """Each lineage's points' x in the fleet plot at ``path`` (its markers, in Chromium's
    DOM), by name (the plot's lineage-N is the fleet table's N-th lineage)."""
    open_page(browser, viewer, "/")
    names = [row.text for row in css(browser, "table.fleet tr.lineage td:first-child a")]
    open_page(browser, viewer, path)
    found = browser.execute_script(
        "return Array.from(document.querySelectorAll('g[id^=\"lineage-\"]')).map("
        "function (g) { return [g.id, Array.from(g.querySelectorAll('use')).map("
        "function (u) { return parseFloat(u.getAttribute('x')); })]; })")
    return {names[int(gid.split("-")[1])]: xs for gid, xs in found}


def _a_fork_s_page_and_plots(browser: Any, viewer: Any) -> None:
    """Issue 41, 6: the fork's page names its parent and that it is suspended; its points
    sit at its parent's generations (child forked from scribe's gen 2: its gen 1 is drawn
    where scribe's gen 3 is); a free model's pages lead with no spend plot."""
    open_page(browser, viewer, "/lineage/child")
    fork = css(browser, "p.fork")[0]
    assert fork.text.startswith("A fork of scribe, from its generation 2"), fork.text
    assert css(browser, "p.fork a.parent")[0].get_attribute("href").endswith("/lineage/scribe")
    assert css(browser, "p.fork a.fork-point")[0].get_attribute("href").endswith(
        "/lineage/scribe/gen/2")
    assert css(browser, "p.suspended")[0].text.startswith("suspended")
    alts = [img.get_attribute("alt") for img in css(browser, "img.plot")]
    assert alts and not [alt for alt in alts if "spend" in alt], alts  # echo: nothing spent
    assert "No model spend recorded" in css(browser, "p.no-spend")[0].text
    open_page(browser, viewer, "/")
    assert css(browser, "tr.lineage span.suspended")  # the fleet says so too
    assert not [img for img in css(browser, "img.fleet-plot")
                if "spend" in img.get_attribute("alt")]
    points = _points(browser, viewer, "/fleet-plot/cpu.svg")
    first, second, third = points["scribe"][:3]
    assert third - second == pytest.approx(second - first, abs=0.5)  # one generation apart
    assert points["child"][0] == pytest.approx(third, abs=0.5), points
    assert points["grandchild"][0] == pytest.approx(third + (second - first), abs=0.5)


def test_the_family_tree_shows_forks_under_their_parents(browser: Any, tmp_path: Path) -> None:
    family = _family(tmp_path / "family")
    child = family.specs / "child.yaml"
    child.write_text(child.read_text() + "  suspend: true\n")
    viewer = start_viewer(family.env, str(family.specs))
    try:
        _a_fork_s_page_and_plots(browser, viewer)
        open_page(browser, viewer, "/")
        (link,) = css(browser, "a.family")
        link.click()
        assert wait_for(lambda: browser.find_elements("css selector", "ul.family-tree"))
        heading = css(browser, "h1")[0].text
        assert heading == "Family tree: 3 forks of 4 lineages", heading
        top = [li.get_attribute("data-lineage")
               for li in css(browser, "ul.family-tree > li.node")]
        assert top == ["scribe"], top
        under = [li.get_attribute("data-lineage") for li in css(
            browser, "li[data-lineage=scribe] > ul > li.node")]
        assert under == ["child", "sibling"], under
        (grand,) = css(browser, "li[data-lineage=child] > ul > li[data-lineage=grandchild]")
        assert "from gen 1 of child" in grand.text and "running kernel" in grand.text
        sibling = css(browser, "li[data-lineage=sibling]")[0]
        assert "from gen 1 of scribe" in sibling.text and "parent kernel" in sibling.text
        assert "same physics" in sibling.text

        # the fork generation's link: the parent's generation page
        fork_link = css(browser, "li[data-lineage=child] > span.forked a.fork-generation")[0]
        assert fork_link.get_attribute("href").endswith("/lineage/scribe/gen/2")
        fork_link.click()
        assert wait_for(lambda: "scribe gen 2" in browser.title)
        assert css(browser, "h1")[0].text.startswith("scribe gen 2:")
        # the node's own link: the fork's lineage page
        open_page(browser, viewer, "/family")
        css(browser, "li[data-lineage=grandchild] > a.lineage")[0].click()
        assert wait_for(lambda: browser.title.startswith("grandchild"))
        assert css(browser, "h1")[0].text.startswith("grandchild: 1")
    finally:
        stop_viewer(viewer)

    # a viewer of the forks alone: their parent is named, marked absent, and still the root
    alone = family.root / "alone"
    alone.mkdir()
    shutil.copy(family.specs / "child.yaml", alone / "child.yaml")
    viewer = start_viewer(family.env, str(alone))
    try:
        open_page(browser, viewer, "/family")
        (root,) = css(browser, "ul.family-tree > li.node")
        assert root.get_attribute("data-lineage") == "scribe"
        assert "absent" in root.get_attribute("class") and "not shown here" in root.text
        (child,) = css(browser, "li[data-lineage=scribe] > ul > li[data-lineage=child]")
        assert "from gen 2 of scribe" in child.text
        assert not css(browser, "li[data-lineage=child] a.fork-generation")  # no page to link
    finally:
        stop_viewer(viewer)
