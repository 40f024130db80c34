"""A fork's descent in the table: the parent and generation its record names, and the
absolute generation only while every ancestor here is the recorded one (real lineages
written with pygit2, tests.observe.builder)."""

from __future__ import annotations

from pathlib import Path

from reconciler.kernel.base.config import LineagePaths
from reconciler.state.summaries import summarize
from reconciler.state.table import Descent, descent, lineage_table
from tests.history.table_fleet import ForkBuilder, fork_record
from tests.observe.builder import LineageBuilder


def _places(*builders: LineageBuilder) -> dict[str, LineagePaths]:
    return {builder.paths.worktree.name: builder.paths for builder in builders}


def test_the_absolute_generation_counts_from_the_root_ancestors_seed(tmp_path: Path) -> None:
    root = LineageBuilder(tmp_path, "root")
    commits = [root.gen("changed") for _ in range(3)]
    child = ForkBuilder(tmp_path, "child", fork_record("root", root.seed, 3, commits[2]))
    c1 = child.gen("changed")
    child.gen("no-change")
    places = _places(root, child)
    assert descent(child.paths, places.get) == Descent("root", 3, 3)
    table = lineage_table("child", child.paths, summarize(child.paths), places=places.get)
    assert [(row.generation, row.absolute_generation) for row in table.rows] == [
        (0, 3), (1, 4), (2, 5)]  # row 0: the seed, born from the root's gen 3
    grandchild = ForkBuilder(tmp_path, "grand", fork_record("child", child.seed, 1, c1))
    assert descent(grandchild.paths, _places(root, child).get).absolute(1) == 3 + 1 + 1
    assert descent(root.paths, places.get) == Descent(None, None, 0)  # no fork


def test_an_ancestor_not_present_or_reborn_leaves_it_unknown(tmp_path: Path) -> None:
    parent = LineageBuilder(tmp_path, "parent")
    parent.gen("changed")
    orphan = ForkBuilder(tmp_path, "orphan", fork_record("gone", "1" * 40, 1, "2" * 40))
    assert descent(orphan.paths, _places(parent).get) == Descent("gone", 1, None)
    # a lineage of the recorded name that lacks the recorded commit is another one
    stranger = ForkBuilder(tmp_path, "stranger", fork_record("parent", parent.seed, 1,
                                                             "3" * 40))
    assert descent(stranger.paths, _places(parent).get) == Descent("parent", 1, None)
    # a forged record naming the lineage itself (with a commit another lineage holds)
    itself = ForkBuilder(tmp_path, "loop", {})
    looped = fork_record("loop", itself.seed, 1, itself.seed)
    again = ForkBuilder(tmp_path / "again", "loop", looped)
    assert descent(again.paths, {"loop": again.paths}.get).seed_generation is None
