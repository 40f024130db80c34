"""The journal of release 2 is physics: only lineages born under it get it.

A lineage born under the kernel before it dies, after the release, under its stored
kernel: its death entry is the original's (the last five stderr lines, the Lisp error
cut off). One born after it dies the same death and keeps the Lisp error line. Real
applies of a real checkout: real sandbox, real Emacs, a replay model whose one reply
is a lethal organism (gen 1 installs it, gen 2 dies of it before it asks for another).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.kernel.base import formats
from tests.apply.helpers import write_replies, write_spec
from tests.host import require
from tests.kernels.checkout import apply_json, commit, replace_source, source_at, workspace
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

# main just before release 2's journal (the fence and the Lisp error line) landed
BEFORE_JOURNAL = "9ed32c446b001de193094220333afe0ee1e8d3c4"
LETHAL = ("(defun deep (n) (if (> n 0) (deep (1- n)) (undefined-function-of-the-organism)))\n"
          "(deep 8)\n")
CAUSE = "Debugger entered--Lisp error: (void-function undefined-function-of-the-organism)"




def _death_block(state: Path, name: str) -> list[str]:
    """The stderr lines of the death entry of generation 2, as CommonMark reads them."""
    journal = (lineage_paths(state, name).worktree / "journal.md").read_text()
    assert [(h.number, h.status) for h in formats.parse_journal(journal)] == \
        [(1, "changed"), (2, "died")]
    return journal.split("\nexit 255\n", 1)[1].split("\n")[1:-2]  # between the fences


def test_only_a_lineage_born_under_release_2_keeps_its_deaths_cause(tmp_path: Path) -> None:
    old_source = tmp_path / "ouro-before"
    require(source_at(BEFORE_JOURNAL, old_source), "needs this repository's git history")
    space = workspace(tmp_path, source=old_source)
    checkout, state, env, specs = space.checkout, space.state, space.env, space.specs
    # gen 2 dies before it asks: the second reply is never used, but apply runs a replay
    # generation only while the folder has a reply left for it
    replies = write_replies(specs / "replies", [LETHAL, ";; never asked for\n"])
    write_spec(specs, "before", 1, provider="replay", replay=str(replies))
    apply_json(checkout, env, specs)  # born under the kernel before the release: gen 1 changed

    replace_source(checkout)
    commit(checkout, "release 2's journal")
    write_spec(specs, "before", 2, provider="replay", replay=str(replies))
    write_spec(specs, "after", 2, provider="replay", replay=str(replies))
    apply_json(checkout, env, specs)

    old = _death_block(state, "before")  # its stored kernel: the original's five lines
    assert len(old) == 5 and CAUSE not in old
    assert (old[0], old[-1]) == ("  deep(8)", "  normal-top-level()")
    new = _death_block(state, "after")
    assert new[0] == CAUSE and len(new) == 6
    assert new[1:] == old  # the same five frames after it
