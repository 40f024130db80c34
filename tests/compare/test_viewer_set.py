"""The viewer's set page reads `ouro compare`'s statistics: n, alive and the survivor rule
for a member that stopped early, and its line drawn to its last point and no further."""

from __future__ import annotations

import re

import numpy as np

from reconciler.spec.sets import Membership
from reconciler.viewer import sets


def member(name: str, cell: str, replica: int, values: dict[int, float],
           generations: int) -> sets.MemberView:
    return sets.MemberView(name, f"/lineage/{name}", Membership("s", cell, replica, {}),
                           values, generations)


CELLS = sets.cells_of([
    member("a0", "a", 0, {1: 1.0, 2: 2.0, 3: 3.0}, 3),
    member("a1", "a", 1, {1: 2.0, 2: 4.0}, 2),  # stopped after generation 2
    member("b0", "b", 0, {1: 10.0, 2: 11.0, 3: 12.0}, 3),
    member("b1", "b", 1, {1: 14.0, 2: 15.0, 3: 16.0}, 3),
])
METRIC = sets.SetMetric("probe.x.y", "probe.x.y", "value")


def test_the_table_is_at_the_newest_generation_under_the_survivor_rule() -> None:
    context = sets.set_context("s", METRIC, CELLS, ["probe.x.y"])
    assert context["generation"] == 3
    a, b = context["cells"]
    assert (a["count"], a["alive"], a["n"], a["mean"]) == (2, "1", "1", "3")
    assert (b["count"], b["alive"], b["n"], b["mean"]) == (2, "2", "2", f"{np.mean([12, 16]):.4g}")
    assert a["ci"] == "—"  # one value: no interval
    (pair,) = context["pairs"]
    assert pair["difference"] == f"{3 - np.mean([12, 16]):.4g}"
    assert "left out of n" in context["rule"]


def test_a_stopped_member_is_drawn_to_its_last_point_and_n_where_it_changes() -> None:
    svg = sets.render_set_svg(METRIC, CELLS).decode()
    stopped = re.search(r'<g id="member-1">(.*?)</g>', svg, re.S)
    assert stopped is not None
    path = re.search(r' d="([^"]+)"', stopped[1])
    assert path is not None and len(re.findall(r"[ML]", path[1])) == 2  # generations 1, 2
    assert all(f'id="{name}"' in svg for name in ("cell-ci-0", "cell-ci-1", "cell-mean-0",
                                                  "cell-mean-1"))
