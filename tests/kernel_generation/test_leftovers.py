"""One leftover classifier: recovery acts on it, the kernel refuses over it, observe reports it.

The table is the rule (``kernel.leftovers``); the lineage cases check that the
three readers of a real lineage's leftovers say the same thing.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.kernel.base.errors import RecoveryError
from reconciler.kernel.transaction import publish, recovery
from reconciler.kernel.transaction.generation import check_extendable
from reconciler.kernel.transaction.leftovers import Leftovers, classify_leftovers
from reconciler.state.observe import observe
from tests.kernel_generation.helpers import Lineage

HEAD = "a" * 40
C = "c" * 40


def _classify(**facts: Any) -> Leftovers:
    base: dict[str, Any] = dict(generations=2, observed=2, head=HEAD, newest_observed=True,
                                pending=None, pending_problem=None, marker_present=False,
                                marker=None)
    return classify_leftovers(**{**base, **facts})


def _marker(generation: object, commit: str | None = None, phase: str = "running"
            ) -> dict[str, Any]:
    return {"schema": publish.MARKER_SCHEMA, "generation": generation, "phase": phase,
            "lineage_commit": commit}


@pytest.mark.parametrize(
    ("facts", "kind", "generation"),
    [
        ({}, "none", None),
        ({"observed": 3, "pending": C}, "roll-forward", 3),
        ({"observed": 3, "pending": C, "pending_problem": "not gen 3"}, "unbalanced", 3),
        ({"observed": 1}, "unbalanced", None),
        ({"observed": 4}, "unbalanced", None),
        ({"newest_observed": False, "marker_present": True, "marker": _marker(3)},
         "unbalanced", 2),
        ({"marker_present": True}, "discard", 3),  # unreadable marker
        ({"marker_present": True, "marker": _marker(3)}, "discard", 3),
        ({"marker_present": True, "marker": _marker(2, HEAD, "publishing")}, "cleanup", 2),
        ({"marker_present": True, "marker": _marker(2, C, "publishing")}, "stray-marker", 2),
        ({"marker_present": True, "marker": _marker(7)}, "stray-marker", 7),
        ({"marker_present": True, "marker": _marker(True)}, "stray-marker", None),
        ({"generations": 0, "observed": 0, "marker_present": True, "marker": _marker(1)},
         "discard", 1),
        ({"generations": 0, "observed": 0, "marker_present": True, "marker": _marker(0, HEAD)},
         "stray-marker", 0),
    ],
)
def test_the_rule(facts: dict[str, Any], kind: str, generation: int | None) -> None:
    found = _classify(**facts)
    assert (found.kind, found.generation) == (kind, generation), found


def test_a_stray_marker_is_refused_alike_by_all_three(born: Lineage) -> None:
    publish.write_marker(born.paths, _marker(5))
    with pytest.raises(RecoveryError, match=r"names generation 5.*a human must look at"):
        recovery.recover(born.paths)
    with pytest.raises(RecoveryError, match="a human must look at"):
        check_extendable(born.paths, born.identity)
    observed = observe(born.paths)
    assert observed.interrupted is None
    assert [p.code for p in observed.problems if "names generation 5" in p.message] == [
        "unbalanced"]


def test_a_marker_of_the_next_generation_is_a_discard_for_all_three(born: Lineage) -> None:
    publish.write_marker(born.paths, _marker(1))
    with pytest.raises(RecoveryError, match="recover it first"):
        check_extendable(born.paths, born.identity)
    observed = observe(born.paths)
    assert observed.interrupted is not None
    assert (observed.interrupted.kind, observed.interrupted.generation) == ("discard", 1)
    assert recovery.recover(born.paths).action == "discarded"
    assert observe(born.paths).interrupted is None
    check_extendable(born.paths, born.identity)
