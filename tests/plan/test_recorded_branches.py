"""Specs that leave the branches unset use the lineage's own (what it records).

Lineages here have the original instrument's layout: its metadata, and branches
named after the folder (``peer`` and ``observations/peer``), as that
instrument's worktree tooling makes them; plus the shared fixture itself.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reconciler.kernel.base.config import LineagePaths
from reconciler.plan import LineagePlan, plan_lineage
from reconciler.spec.load import load_specs
from reconciler.state import instrument
from reconciler.state.branches import recorded_branches, spec_paths
from reconciler.state.observe import observe
from reconciler.state.status import read_status
from tests.inprocess import ouro
from tests.plan.helpers import spec_yaml, write_specs
from tests.plan.original import ORIGINAL, folder_paths, peer


def plan_of(tmp_path: Path, paths: LineagePaths, *, generations: int = 5,
            branches: bool = False, name: str = "peer") -> LineagePlan:
    file = write_specs(tmp_path / "specs", spec_yaml(name, paths, generations=generations,
                                                     provider="echo", model="echo",
                                                     branches=branches))
    (loaded,) = load_specs([file])
    return plan_lineage(loaded, observe(spec_paths(loaded)), instrument.current())


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        *args: str | Path) -> tuple[int, str]:
    code, out, _err = ouro(monkeypatch, capsys, *args)
    return code, out


# ---------------------------------------------------------------- the original's layout


def test_unset_branches_are_the_ones_the_lineage_records(tmp_path: Path) -> None:
    built = peer(tmp_path)
    recorded = recorded_branches(built.paths)
    assert (recorded.lineage, recorded.observation) == ("peer", "observations/peer")
    assert "metadata.json" in recorded.lineage_source
    result = plan_of(tmp_path, built.paths)
    assert result.branches == {"lineage": "peer", "observation": "observations/peer"}
    assert [r.reason for r in result.refusals] == ["instrument-commit-drift"]
    assert result.observed_generations == 3
    assert result.heads["lineage"] == built.head


def test_the_refusal_names_the_original_instrument_and_what_ouro_does(tmp_path: Path) -> None:
    result = plan_of(tmp_path, peer(tmp_path).paths)
    for words in (ORIGINAL.repository, ORIGINAL.ref, ORIGINAL.commit, "not by an ouro kernel",
                  "reads and verifies", "does not extend"):
        assert words in result.message
    assert "run the ouro at that commit" not in result.message


def test_a_spec_naming_another_branch_is_refused_naming_both_and_still_counted(
    tmp_path: Path,
) -> None:
    built = peer(tmp_path)
    result = plan_of(tmp_path, folder_paths(tmp_path, "peer", branch="lineage-peer"),
                     branches=True)
    assert [r.reason for r in result.refusals] == ["branch-mismatch", "instrument-commit-drift"]
    mismatch = result.refusals[0].message
    assert "'peer'" in mismatch and "'lineage-peer'" in mismatch
    assert "'observations/peer'" in mismatch and "'observations/lineage-peer'" in mismatch
    assert result.observed_generations == 3  # read from the branch that holds it
    assert result.heads["lineage"] == built.head


def test_a_spec_naming_only_the_lineage_branch_gets_the_recorded_observation_branch(
    tmp_path: Path,
) -> None:
    built = peer(tmp_path)
    file = write_specs(tmp_path / "specs", spec_yaml(
        "peer", built.paths, generations=5, provider="echo", model="echo", branches=False,
    ).replace("    observations:", "    branch: peer\n    observations:"))
    (loaded,) = load_specs([file])
    assert (loaded.declared_branch, loaded.declared_observation_branch) == ("peer", None)
    assert spec_paths(loaded) == built.paths


def test_without_its_observation_repo_the_lineage_head_names_the_branch(tmp_path: Path) -> None:
    built = peer(tmp_path)
    shutil.rmtree(built.paths.observations)
    result = plan_of(tmp_path, built.paths)
    assert result.branches["lineage"] == "peer"
    assert [r.reason for r in result.refusals] == ["partial-paths", "instrument-commit-drift"]
    assert result.observed_generations == 3


def test_an_ouro_lineage_on_other_branches_is_extended_on_them(tmp_path: Path) -> None:
    built = peer(tmp_path, identity=instrument.current(), name="mine")
    result = plan_of(tmp_path, built.paths, name="mine")
    assert (result.action, result.refusals) == ("extend", ())
    assert result.branches == {"lineage": "mine", "observation": "observations/mine"}
    assert (result.observed_generations, result.missing_generations) == (3, 2)


def test_a_birth_uses_the_default_branches(tmp_path: Path) -> None:
    result = plan_of(tmp_path, folder_paths(tmp_path, "fresh"), name="fresh")
    assert result.action == "create"
    assert result.branches == {"lineage": "lineage-fresh",
                               "observation": "observations/lineage-fresh"}


def test_status_of_a_refused_lineage_counts_deaths_and_spend(tmp_path: Path) -> None:
    for branches, paths in ((False, folder_paths(tmp_path, "peer")),
                            (True, folder_paths(tmp_path, "peer", branch="lineage-peer"))):
        if not paths.git_dir.exists():
            peer(tmp_path)
        file = write_specs(tmp_path / "specs", spec_yaml("peer", paths, generations=5,
                                                         branches=branches))
        (loaded,) = load_specs([file])
        resolved = spec_paths(loaded)
        report = read_status(resolved, observe(resolved))
        assert report.generations == 3, branches
        assert report.outcomes == {"changed": 1, "no-change": 1, "died": 1}
        assert report.death_kinds == {"process_exit": 1}
        assert report.accounted_usd == "0.50"


# ---------------------------------------------------------------- the CLI's three outputs


def test_plan_text_json_and_markdown_of_the_original_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    peer(tmp_path)
    specs = write_specs(tmp_path / "specs",
                        spec_yaml("peer", folder_paths(tmp_path, "peer"), generations=5,
                                  provider="echo", model="echo", branches=False),
                        spec_yaml("other", folder_paths(tmp_path, "other", branch="x"),
                                  generations=5, provider="echo", model="echo"))
    peer(tmp_path, name="other")
    code, out = run(monkeypatch, capsys, "plan", specs, "--json")
    assert code == 1
    by_name = {item["name"]: item for item in json.loads(out)["lineages"]}
    assert [r["reason"] for r in by_name["peer"]["reasons"]] == ["foreign-kernel"]
    assert [r["reason"] for r in by_name["other"]["reasons"]] == [
        "branch-mismatch", "foreign-kernel"]
    assert by_name["other"]["reason"] == "branch-mismatch"
    assert by_name["other"]["message"] == by_name["other"]["reasons"][0]["message"]
    assert by_name["peer"]["observed_generations"] == by_name["other"]["observed_generations"] == 3
    assert by_name["peer"]["branches"] == {"lineage": "peer", "observation": "observations/peer"}
    assert by_name["other"]["branches"] == {"lineage": "x", "observation": "observations/x"}

    code, out = run(monkeypatch, capsys, "plan", specs)
    assert code == 1
    assert "refuse (foreign-kernel)" in out
    assert "refuse (branch-mismatch)" in out and "3 generations observed" in out
    assert out.count("foreign-kernel: lineage") == 2
    assert "branch-mismatch: lineage other" in out

    code, out = run(monkeypatch, capsys, "plan", specs, "--markdown")
    assert "| `other` | `branch-mismatch`<br>`foreign-kernel` | 3 |" in out
    assert "| `peer` | `foreign-kernel` | 3 |" in out


def test_the_shared_fixture_with_unset_branches(
    original_lineage: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = original_lineage.parent
    paths = LineagePaths(original_lineage, root / "fixture.git", root / "fixture.observations",
                         "lineage-fixture", "observations/lineage-fixture")
    specs = write_specs(root / "specs", spec_yaml("fixture", paths, generations=6,
                                                  provider="echo", model="echo",
                                                  branches=False))
    code, out = run(monkeypatch, capsys, "plan", specs, "--json")
    (item,) = json.loads(out)["lineages"]
    assert code == 1
    assert [r["reason"] for r in item["reasons"]] == ["foreign-kernel"]
    assert item["observed_generations"] == 5
    for words in ("https://github.com/scottviteri/ouroboros", "main-with-debian-emacs-path",
                  "0b8df4c1442a055ec918cca8054cdf01f7b4ac33", "does not extend"):
        assert words in item["message"]
    code, out = run(monkeypatch, capsys, "status", specs, "--json")
    (status,) = json.loads(out)["lineages"]
    assert (status["generations"], status["outcomes"]["died"]) == (5, 1)
    assert status["death_kinds"] and sum(status["death_kinds"].values()) == 1


def test_verify_audits_the_branches_the_lineage_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    peer(tmp_path)
    specs = write_specs(tmp_path / "specs", spec_yaml(
        "peer", folder_paths(tmp_path, "peer"), generations=1, provider="echo", model="echo",
        branches=False))
    code, out = run(monkeypatch, capsys, "verify", specs)
    assert code == 0, out
    assert "peer: consistent (3 generations, 3 observations)" in out


def test_the_old_sample_bundle_is_read_on_its_own_branch(
    sample_lineage: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An older instrument's lineage, no metadata, no observations, on branch `main`."""
    paths = LineagePaths(sample_lineage, sample_lineage / ".git",
                         sample_lineage.parent / "sample.observations", "main", "observations/main")
    specs = write_specs(sample_lineage.parent / "specs", spec_yaml(
        "sample", paths, generations=8, provider="echo", model="echo", branches=False))
    code, out = run(monkeypatch, capsys, "plan", specs, "--json")
    (item,) = json.loads(out)["lineages"]
    assert code == 1
    assert [r["reason"] for r in item["reasons"]] == ["no-metadata", "partial-paths"]
    assert item["observed_generations"] == 5  # 5 generations among 10 commits


def test_verify_of_the_shared_fixture_with_unset_branches(
    original_lineage: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = original_lineage.parent
    paths = LineagePaths(original_lineage, root / "fixture.git", root / "fixture.observations",
                         "x", "y")
    specs = write_specs(root / "specs", spec_yaml("fixture", paths, generations=5,
                                                  provider="echo", model="echo",
                                                  branches=False))
    code, out = run(monkeypatch, capsys, "verify", specs)
    assert code == 0, out
    assert "fixture: consistent (5 generations, 5 observations)" in out


def test_observe_reads_the_records_again_only_when_they_may_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler.state import observe as observe_module

    calls: list[LineagePaths] = []
    real = observe_module.recorded_branches

    def counting(paths: LineagePaths) -> object:
        calls.append(paths)
        return real(paths)

    monkeypatch.setattr(observe_module, "recorded_branches", counting)
    built = peer(tmp_path)
    assert observe(built.paths).problems == () and calls == []  # all read agrees
    seen = observe(folder_paths(tmp_path, "peer", branch="lineage-peer"))
    assert calls and any("records branch 'peer'" in p.message for p in seen.problems)
