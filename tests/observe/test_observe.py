"""observe(): real repositories in, what they are out; damage is reported, never raised."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest

from reconciler.kernel.base.config import LineagePaths
from reconciler.state.observe import Observed, observe
from tests.observe.builder import LineageBuilder, lineage_paths


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[LineageBuilder], None]
    generations: int
    observed: int
    problems: tuple[str, ...] = ()
    interrupted: str | None = None
    dirty: bool = False


def _gens(n: int, status: str = "no-change") -> Callable[[LineageBuilder], None]:
    def build(b: LineageBuilder) -> None:
        for _ in range(n):
            b.gen(status)
    return build


def _interleaved(b: LineageBuilder) -> None:
    b.hand_commit("hand-commit: crasher")
    b.gen("died")
    b.external_edit()
    b.gen("changed")
    b.gen()
    b.hand_commit("human-written signpost")
    b.external_edit("notes.txt", b"more\n")


def _head_is_external_edit(b: LineageBuilder) -> None:
    b.gen()
    b.external_edit()


def _roll_forward(b: LineageBuilder) -> None:
    b.gen()
    b.external_edit()
    b.gen(move_branch=False)  # built and observed, branch not moved: the crash window


def _discard_running(b: LineageBuilder) -> None:
    b.gen()
    b.write_marker(phase="running")


def _discard_publishing(b: LineageBuilder) -> None:
    b.gen()
    orphan = b.gen(observe=False, move_branch=False)
    b.write_marker(phase="publishing", lineage_commit=orphan)


def _cleanup(b: LineageBuilder) -> None:
    b.gen()
    head = b.gen()
    b.write_marker(phase="publishing", lineage_commit=head, generation=2)


def _unreadable_marker(b: LineageBuilder) -> None:
    b.gen()
    (b.paths.git_dir / "ouro-generation.json").write_text("{not json", encoding="utf-8")


def _missing_observation(b: LineageBuilder) -> None:
    _gens(3)(b)
    b.drop_observation(3)


def _extra_observations(b: LineageBuilder) -> None:
    b.gen()
    b.observe(2, b.head)
    b.observe(3, b.head)


def _names_foreign_commit(b: LineageBuilder) -> None:
    b.gen(observe=False)
    b.observe(1, "ab" * 20)


def _first_record_foreign(b: LineageBuilder) -> None:
    _gens(3)(b)
    b.observe(1, "cd" * 20)  # the newest record still agrees: the O(1) check must not miss it


def _names_other_commit(b: LineageBuilder) -> None:
    b.gen(observe=False)
    b.observe(1, b.seed)


def _forged_generation(b: LineageBuilder) -> None:
    _gens(2)(b)
    b.hand_commit("gen 3: no-change")  # a human's commit that looks like a generation


def _renumbered(b: LineageBuilder) -> None:
    b.gen(observe=False)
    b.hand_commit("gen 7: no-change")
    b.observe(7, b.head)


def _dirty_edit(b: LineageBuilder) -> None:
    b.gen()
    (b.paths.worktree / "organism.el").write_text("(edited by hand)\n", encoding="utf-8")


def _dirty_untracked(b: LineageBuilder) -> None:
    (b.paths.worktree / "new-file.txt").write_text("hello\n", encoding="utf-8")


def _other_branch_checked_out(b: LineageBuilder) -> None:
    b.gen()
    b.repo.references.create("refs/heads/other", b.head)
    b.repo.set_head("refs/heads/other")


def _observation_branch_checked_out(b: LineageBuilder) -> None:
    assert b.obs is not None
    b.obs.references.create("refs/heads/other", b.obs.head.target)
    b.obs.set_head("refs/heads/other")


def _no_observation_metadata(b: LineageBuilder) -> None:
    b._observe({"metadata.json": None}, "hand: drop metadata")


def _wrong_gitlink(b: LineageBuilder) -> None:
    (b.paths.worktree / ".git").write_text("gitdir: /nonexistent.git\n", encoding="utf-8")


def _no_observation_repo(b: LineageBuilder) -> None:
    b.gen()
    shutil.rmtree(b.paths.observations)


def _no_worktree(b: LineageBuilder) -> None:
    b.gen()
    shutil.rmtree(b.paths.worktree)


def _root_not_seed(b: LineageBuilder) -> None:
    root = b.repo.create_commit(None, b.repo[b.seed].author, b.repo[b.seed].author,
                                "initial import\n", b.repo[b.seed].tree.id, [])
    b.repo.references.create(f"refs/heads/{b.paths.branch}", root, force=True)


CASES = [
    Case("fresh", lambda b: None, 0, 0),
    Case("three-generations", _gens(3), 3, 3),
    Case("hand-and-external-commits-between", _interleaved, 3, 3),
    Case("head-is-external-edit", _head_is_external_edit, 1, 1),
    Case("roll-forward", _roll_forward, 1, 2, interrupted="roll-forward"),
    Case("marker-running-discard", _discard_running, 1, 1, interrupted="discard"),
    Case("marker-publishing-no-observation", _discard_publishing, 1, 1, interrupted="discard"),
    Case("marker-everything-published", _cleanup, 2, 2, interrupted="cleanup"),
    Case("marker-unreadable", _unreadable_marker, 1, 1, interrupted="discard"),
    Case("observation-missing", _missing_observation, 3, 2, problems=("unbalanced",)),
    Case("observations-ahead-by-two", _extra_observations, 1, 3, problems=("unbalanced",)),
    Case("record-names-foreign-commit", _names_foreign_commit, 1, 1,
         problems=("observation-disagrees",)),
    Case("first-record-names-foreign-commit", _first_record_foreign, 3, 3,
         problems=("observation-disagrees",)),
    Case("record-names-other-commit", _names_other_commit, 1, 1, problems=("unbalanced",)),
    Case("forged-gen-commit", _forged_generation, 3, 2, problems=("unbalanced",)),
    Case("renumbered-gen-subject", _renumbered, 2, 1, problems=("unbalanced",)),
    Case("dirty-edit", _dirty_edit, 1, 1, dirty=True),
    Case("dirty-untracked", _dirty_untracked, 0, 0, dirty=True),
    Case("other-branch-checked-out", _other_branch_checked_out, 1, 1,
         problems=("branch-mismatch",)),
    Case("observation-branch-not-checked-out", _observation_branch_checked_out, 0, 0,
         problems=("branch-mismatch",)),
    Case("no-observation-metadata", _no_observation_metadata, 0, 0,
         problems=("observation-disagrees",)),
    Case("worktree-gitlink-elsewhere", _wrong_gitlink, 0, 0, problems=("partial-paths",)),
    Case("observation-repo-missing", _no_observation_repo, 1, 0, problems=("partial-paths",)),
    Case("worktree-missing", _no_worktree, 1, 1, problems=("partial-paths",)),
    Case("root-not-seed", _root_not_seed, 0, 0, problems=("not-a-lineage",)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_observe(tmp_path: Path, case: Case) -> None:
    builder = LineageBuilder(tmp_path)
    case.build(builder)
    seen = observe(builder.paths)
    assert seen.generations == case.generations
    assert seen.observed_generations == case.observed
    assert sorted({p.code for p in seen.problems}) == sorted(set(case.problems)), seen.problems
    assert (seen.interrupted.kind if seen.interrupted else None) == case.interrupted
    assert seen.dirty == case.dirty, seen.dirty_paths
    if not case.problems:
        assert seen.is_lineage
        assert seen.root_commit == builder.seed
        assert seen.lineage_metadata == builder.lineage_metadata()


def test_fresh_lineage_facts(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path)
    builder.gen("changed")
    builder.gen("died")
    seen = observe(builder.paths)
    assert seen.all_exist and seen.is_lineage and not seen.full_walk
    assert seen.lineage_head == builder.head
    assert seen.last_generation is not None
    assert (seen.last_generation.number, seen.last_generation.status) == (2, "died")
    assert seen.last_observation is not None and seen.last_observation["generation"] == 2
    assert seen.observation_metadata == builder.observation_metadata()
    assert seen.head_branch == builder.paths.branch


def test_roll_forward_names_the_pending_commit(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path)
    builder.gen()
    pending = builder.gen(move_branch=False)
    seen = observe(builder.paths)
    assert seen.interrupted is not None
    assert (seen.interrupted.generation, seen.interrupted.lineage_commit) == (2, pending)


def test_nothing_exists(tmp_path: Path) -> None:
    seen = observe(lineage_paths(tmp_path, "ghost"))
    assert not seen.any_exists and seen.problems == () and seen.generations == 0


def test_git_dir_that_is_not_a_repository(tmp_path: Path) -> None:
    paths = lineage_paths(tmp_path, "junk")
    for place in (paths.worktree, paths.git_dir, paths.observations):
        place.mkdir()
    (paths.git_dir / "HEAD").write_text("garbage", encoding="utf-8")
    seen = observe(paths)
    assert "not-a-lineage" in {p.code for p in seen.problems}
    assert not seen.is_lineage


def test_seed_without_metadata(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path, metadata=False)
    builder.gen()
    seen = observe(builder.paths)
    assert [p.code for p in seen.problems] == ["no-metadata"]
    assert seen.generations == 1 and seen.lineage_metadata is None


def test_corrupt_object_is_reported_not_raised(tmp_path: Path) -> None:
    builder = LineageBuilder(tmp_path)
    builder.gen()
    head = builder.head
    loose = builder.paths.git_dir / "objects" / head[:2] / head[2:]
    loose.chmod(0o644)
    loose.write_bytes(b"not zlib")
    seen = observe(builder.paths)
    assert seen.problems, "a corrupt head commit must be reported"


def _paths_of(worktree: Path, git_dir: Path, observations: Path, branch: str) -> LineagePaths:
    return LineagePaths(worktree, git_dir, observations, branch, f"observations/{branch}")


def test_sample_bundle_reads_five_generations_and_no_metadata(sample_lineage: Path) -> None:
    seen = observe(_paths_of(sample_lineage, sample_lineage / ".git",
                             sample_lineage.with_name("sample.observations"), "main"))
    assert seen.generations == 5
    assert seen.last_generation is not None and seen.last_generation.status == "changed"
    assert "no-metadata" in {p.code for p in seen.problems}
    assert seen.root_commit == "46f9bf3d2a142658c2a704475aadb235750a7eb4"
    assert seen.lineage_metadata is None


def test_original_fixture_reads_exactly(original_lineage: Path) -> None:
    root = original_lineage.parent
    seen: Observed = observe(_paths_of(original_lineage, root / "fixture.git",
                                       root / "fixture.observations", "lineage-fixture"))
    assert seen.problems == ()
    assert (seen.generations, seen.observed_generations) == (5, 5)
    assert not seen.full_walk and not seen.dirty and seen.interrupted is None
    assert seen.lineage_head == "ef2778defe2e2a6cab66161f44bc38d7e8ea697f"
    assert seen.root_commit == "508ef5af660e94ef55b9f33cff450fb0c9e25d9e"
    assert seen.lineage_metadata is not None
    assert seen.lineage_metadata["instrument_commit"] == "0b8df4c1442a055ec918cca8054cdf01f7b4ac33"
    assert seen.last_observation is not None and seen.last_observation["outcome"] == "no-change"


def test_observe_uses_no_git_subprocess(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("observe ran a subprocess")

    builder = LineageBuilder(tmp_path)
    builder.gen()
    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert observe(builder.paths).generations == 1


def test_pygit2_is_what_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """observe opens both repositories through pygit2, and reads nothing when it cannot."""
    builder = LineageBuilder(tmp_path)
    builder.gen()
    opened: list[str] = []

    class Recording(pygit2.Repository):
        def __init__(self, path: str, *args: object) -> None:
            opened.append(str(Path(path).resolve()))
            super().__init__(path, *args)

    monkeypatch.setattr(pygit2, "Repository", Recording)
    seen = observe(builder.paths)
    assert seen.generations == 1 and seen.last_observation is not None
    assert str(builder.paths.git_dir.resolve()) in opened
    assert str(builder.paths.observations.resolve()) in opened

    class Unreadable(pygit2.Repository):
        def __init__(self, path: str, *args: object) -> None:
            raise pygit2.GitError(f"refused {path}")

    monkeypatch.setattr(pygit2, "Repository", Unreadable)
    blind = observe(builder.paths)
    assert blind.generations != 1 or blind.last_observation is None


def test_status_spend_counts_discarded_attempts_too(tmp_path: Path) -> None:
    """A generation discarded after a crash re-runs; the money it spent is still spent."""
    import json

    from reconciler.kernel.base import formats
    from reconciler.state.status import read_status

    call = {"accounted_usd": "0.10"}
    builder = LineageBuilder(tmp_path)
    builder.gen("changed", calls=[call])
    builder.gen("died", calls=[call, call])
    discarded = {"generation": 3, "model_calls": [{"accounted_usd": "0.25"}]}
    builder._observe({f"{formats.INTERRUPTED_DIR}/0003-20261129T160000Z.json":
                      json.dumps(discarded).encode()}, "observe: interrupted gen 3 (discarded)")
    report = read_status(builder.paths, observe(builder.paths))
    assert report.accounted_usd == "0.55"
    assert report.generations == 2
    assert sum(report.death_kinds.values()) == 1  # the discarded attempt is no death
