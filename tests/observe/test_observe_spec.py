"""observe_spec: where a spec's lineage lives (``branches.spec_paths``) and what it is
there, in one pass that opens each repository once; an in-sync lineage's record answers
the recorded branches. Its answer is exactly ``spec_paths`` then ``observe``'s."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from reconciler.kernel.base.config import LineagePaths
from reconciler.state import branches, observed_cache, repos
from reconciler.state import observe as observe_module
from reconciler.state.branches import Recorded, spec_paths
from reconciler.state.observe import observe, observe_spec
from tests.observe.builder import LineageBuilder
from tests.observe.spies import count_opens


@dataclass(frozen=True)
class _Spec:
    """What resolution needs of a spec: its default places, and the branches it names."""

    places: LineagePaths
    declared_branch: str | None = None
    declared_observation_branch: str | None = None

    def paths(self) -> LineagePaths:
        return replace(self.places, branch=self.declared_branch or self.places.branch,
                       observation_branch=self.declared_observation_branch
                       or f"observations/{self.declared_branch or self.places.branch}")


def _in_sync(root: Path, name: str = "alpha", paths: LineagePaths | None = None
             ) -> LineageBuilder:
    builder = LineageBuilder(root, name, paths=paths)
    builder.gen("changed")
    builder.gen()
    builder.checkout()
    return builder


def _as_separately(spec: _Spec, cache: Path | None) -> tuple[LineagePaths, object]:
    paths = spec_paths(spec)
    return paths, observe(paths, cache)


@pytest.mark.parametrize("cached", [False, True])
def test_the_answer_is_where_then_observe(tmp_path: Path, cache: Path, cached: bool) -> None:
    builder = _in_sync(tmp_path)
    spec = _Spec(builder.paths)
    folder = cache if cached else None
    for _ in range(2):  # the second time from the record, when cached
        paths, seen = observe_spec(spec, folder)
        assert (paths, seen) == _as_separately(spec, folder)
        assert seen.generations == 2 and not seen.problems and not seen.dirty
    assert bool(list(cache.glob("*.observed.json"))) == cached


def test_the_record_answers_the_recorded_branches(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = _in_sync(tmp_path)
    spec = _Spec(builder.paths)
    first = observe_spec(spec, cache)  # reads the repositories, keeps the record
    opened = count_opens(monkeypatch)

    def refuse(paths: LineagePaths, lineage: object = None) -> Recorded:
        raise AssertionError("the recorded branches were read from the repositories")

    monkeypatch.setattr(observe_module, "recorded_branches", refuse)
    monkeypatch.setattr(branches, "recorded_branches", refuse)
    assert observe_spec(spec, cache) == first
    assert sorted(opened) == sorted({p for p in opened})  # each repository opened once
    assert set(opened) <= {builder.paths.git_dir, builder.paths.observations}


def test_each_repository_is_opened_once_without_a_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = _in_sync(tmp_path)
    opened = count_opens(monkeypatch)
    paths, seen = observe_spec(_Spec(builder.paths))
    assert seen.generations == 2 and paths == builder.paths
    assert sorted(opened) == sorted([builder.paths.git_dir, builder.paths.observations])


def test_a_lineage_on_branches_of_its_own_is_found_on_them(tmp_path: Path,
                                                           cache: Path) -> None:
    """The spec names no branch; the lineage records others (adopted under a name it
    records): found where its records say, the record keyed by those branches."""
    own = LineagePaths(tmp_path / "alpha", tmp_path / "alpha.git",
                       tmp_path / "alpha.observations", "main", "observations/main",
                       name="alpha")
    _in_sync(tmp_path, paths=own)
    spec = _Spec(replace(own, branch="lineage-alpha",
                         observation_branch="observations/lineage-alpha"))
    for _ in range(2):
        paths, seen = observe_spec(spec, cache)
        assert (paths.branch, paths.observation_branch) == ("main", "observations/main")
        assert (paths, seen) == _as_separately(spec, cache) and not seen.problems


def test_a_declared_branch_that_differs_is_refused_as_before(tmp_path: Path,
                                                             cache: Path) -> None:
    builder = _in_sync(tmp_path)
    observe_spec(_Spec(builder.paths), cache)  # a record at the lineage's own branches
    spec = _Spec(builder.paths, declared_branch="elsewhere")
    paths, seen = observe_spec(spec, cache)
    assert (paths, seen) == _as_separately(spec, cache)
    assert [p.code for p in seen.problems][:1] == ["branch-mismatch"]


def test_nothing_there_is_a_birth(tmp_path: Path, cache: Path) -> None:
    spec = _Spec(LineagePaths(tmp_path / "new", tmp_path / "new.git",
                              tmp_path / "new.observations", "lineage-new",
                              "observations/lineage-new", name="new"))
    paths, seen = observe_spec(spec, cache)
    assert paths == spec.paths() and not seen.any_exists


def test_a_record_tells_the_branches_only_when_head_is_on_its_branch(
        tmp_path: Path, cache: Path) -> None:
    builder = _in_sync(tmp_path)
    observe(builder.paths, cache)
    found = observed_cache.heads(builder.paths, repos.Lineage(builder.paths))
    recalled = observed_cache.recall(cache, builder.paths, found)
    assert recalled is not None
    cached = recalled.observed
    told = observed_cache.recorded(cached, found)
    assert told is not None and (told.lineage, told.observation) == (
        builder.paths.branch, builder.paths.observation_branch)
    elsewhere = replace(found, observation_head_branch="observations/other")
    assert observed_cache.recorded(cached, elsewhere) is None
    nameless = replace(cached, observation_metadata={"lineage_branch": " "})
    assert observed_cache.recorded(nameless, found) is None
