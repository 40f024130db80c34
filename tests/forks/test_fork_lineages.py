"""Forks of real lineages: byte-exact seeds that run, their ancestry in both metadata files
and the first observation, forks of forks and sets of forks, every plan-time refusal, and
verify's ancestry check (linked, parent not present, tampered on either side)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from reconciler.kernel.base import formats
from tests.apply.helpers import assert_invariant, run_ouro, write_spec
from tests.forks.helpers import (
    Family,
    fork_spec,
    grow_family,
    metadata,
    plan_json,
    rewrite,
    root_tree,
    seed_entries,
    verify,
)
from tests.kernel_formats import original_reader
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Family]:
    """One parent for the module (three real generations); each test works on a copy."""
    yield grow_family(tmp_path_factory.mktemp("family") / "family")


@pytest.fixture
def family(grown: Family, tmp_path: Path) -> Family:
    return grown.copy(tmp_path / "family")


def _refs(family: Family, name: str) -> dict[str, str]:
    paths = lineage_paths(family.state, name)
    found = {}
    for place in (paths.git_dir, paths.observations):
        repo = pygit2.Repository(str(place))
        found.update({f"{place.name}:{ref}": str(repo.references[ref].target)
                      for ref in repo.references})
    return found


def _generation_commit(family: Family, name: str, number: int) -> pygit2.Commit:
    repo = pygit2.Repository(str(lineage_paths(family.state, name).git_dir))
    commit = repo.references[f"refs/heads/lineage-{name}"].peel(pygit2.Commit)
    chain = [commit]
    while chain[-1].parents:
        chain.append(chain[-1].parents[0])
    numbered = [c for c in reversed(chain) if formats.is_generation_subject(
        c.message.split("\n", 1)[0])]
    return numbered[number - 1]


def test_a_fork_is_byte_exact_and_runs(family: Family) -> None:
    before = _refs(family, "scribe")
    spec = fork_spec(family.specs, "child", "scribe", 2)
    code, plan = plan_json(family, spec)
    (item,) = plan["lineages"]
    gen2 = _generation_commit(family, "scribe", 2)
    assert code == 2 and item["action"] == "create", item
    assert item["fork"]["commit"] == str(gen2.id) and item["fork"]["kernel"] == "running"
    applied = run_ouro("apply", "-y", str(spec), env=family.env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert _refs(family, "scribe") == before  # the parent is only read

    # the seed: every entry of gen 2's tree, the parent's object with its mode, but the
    # metadata and the journal
    seed = seed_entries(family, "child")
    parent = {str(e.name): (str(e.id), e.filemode) for e in gen2.tree}
    kernel_owned = {".ouroboros-lineage.json", "journal.md"}
    assert set(seed) == set(parent)
    assert {k: v for k, v in seed.items() if k not in kernel_owned} == {
        k: v for k, v in parent.items() if k not in kernel_owned}
    tree = family.state / "child"
    assert (tree / "memory" / "notes.md").read_text() == "gen 1 learned to keep notes\n"
    assert os.stat(tree / "bin" / "run.sh").st_mode & stat.S_IXUSR
    assert os.readlink(tree / "link") == "memory/notes.md"
    assert_invariant(lineage_paths(family.state, "child"), 1)  # it ran, and audits clean

    # the ancestry: both metadata files and the first observation
    record = metadata(family, "child")["ouro_fork"]
    _, root = root_tree(family, "scribe")
    assert record == {
        "schema": "ouro-fork/v1", "parent": "scribe", "parent_root": str(root.id),
        "parent_branch": "lineage-scribe", "generation": 2, "commit": str(gen2.id),
        "parent_kernel": {"commit": metadata(family, "scribe")["instrument_commit"],
                          "fingerprint": metadata(family, "scribe")["instrument_fingerprint"]},
        "kernel": "running", "same_physics": True}
    observations = pygit2.Repository(str(lineage_paths(family.state, "child").observations))
    head = observations.head.peel(pygit2.Commit)
    assert json.loads(head.tree["metadata.json"].data)["ouro_fork"] == record
    first = json.loads(head.tree["generations/0001.json"].data)
    assert first["ran_with"]["fork"] == record

    # the journal: the parent's under a preface, and both readers see only gen 1
    journal = (tree / "journal.md").read_text()
    assert journal.startswith("# forked from scribe at gen 2\n")
    assert "### gen 1 \u2014 no-change" in journal and "### gen 2 \u2014 no-change" in journal
    assert [h.number for h in formats.parse_journal(journal)] == [1]
    assert original_reader.verify(journal, ["no-change"]) == []

    code, report = verify(family, spec)
    assert code == 0 and report["child"]["ancestry"] == "linked", report


def test_a_fork_of_a_fork_and_a_set_of_forks(family: Family) -> None:
    child = fork_spec(family.specs, "child", "scribe", 2)
    grand = fork_spec(family.specs, "grandchild", "child", 1)
    sweep = family.specs / "sweep.yaml"
    sweep.write_text(
        "apiVersion: ouro/v1\nkind: LineageSet\nmetadata: {name: replay}\nspec:\n"
        "  replicas: 2\n  template:\n    generations: 1\n    model: {provider: echo}\n"
        "    from: {lineage: scribe, generation: 1}\n")
    code, plan = plan_json(family, child, grand, sweep)
    actions = {item["name"]: (item["action"], item["reason"]) for item in plan["lineages"]}
    assert code == 1 and actions == {  # the grandchild's parent has no gen 1 yet
        "child": ("create", None), "grandchild": ("refuse", "fork-no-generation"),
        "replay-0": ("create", None), "replay-1": ("create", None)}, actions
    run_ouro("apply", "-y", str(child), str(sweep), env=family.env)
    applied = run_ouro("apply", "-y", str(child), str(grand), str(sweep), env=family.env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    grand_record = metadata(family, "grandchild")["ouro_fork"]
    _, child_root = root_tree(family, "child")
    assert (grand_record["parent"], grand_record["parent_root"], grand_record["generation"]) \
        == ("child", str(child_root.id), 1)
    journal = (family.state / "grandchild" / "journal.md").read_text()
    assert journal.startswith("# forked from child at gen 1\n")
    assert "#### gen 1 \u2014" in journal or "### gen 1 \u2014" in journal
    assert [h.number for h in formats.parse_journal(journal)] == [1]
    assert original_reader.heading_numbers(journal) == [1]
    gen1 = str(_generation_commit(family, "scribe", 1).id)
    for member in ("replay-0", "replay-1"):
        assert metadata(family, member)["ouro_fork"]["commit"] == gen1
        assert_invariant(lineage_paths(family.state, member), 1)
    code, report = verify(family, child, grand, sweep)
    assert code == 0, report
    assert {name: item["ancestry"] for name, item in report.items()} == {
        "child": "linked", "grandchild": "linked", "replay-0": "linked", "replay-1": "linked"}


def test_each_refusal_names_its_reason_and_creates_nothing(family: Family) -> None:
    (family.state / "junk.git").mkdir()
    (family.state / "junk.git" / "HEAD").write_text("not a repository\n")
    specs = [fork_spec(family.specs, "late", "scribe", 9),
             fork_spec(family.specs, "dead", "scribe", 3),
             fork_spec(family.specs, "ghostly", "ghost", 1),
             fork_spec(family.specs, "junky", "junk", 1, kernel="parent")]
    code, plan = plan_json(family, *specs)
    found = {item["name"]: (item["action"], item["reason"], item["message"])
             for item in plan["lineages"]}
    assert code == 1
    assert found["late"][:2] == ("refuse", "fork-no-generation")
    assert "lineage scribe has 3 generations, no gen 9" in found["late"][2]
    assert found["dead"][:2] == ("refuse", "fork-death")
    assert "is a death" in found["dead"][2] and "fork from the generation before" in found[
        "dead"][2]
    assert found["ghostly"][:2] == ("refuse", "fork-no-generation")
    assert "lineage ghost does not exist (yet)" in found["ghostly"][2]
    assert found["junky"][:2] == ("refuse", "fork-unreadable")
    assert "no readable lineage at" in found["junky"][2]
    text = run_ouro("plan", *map(str, specs), env=family.env)
    assert "fork-death: lineage dead: cannot fork from gen 3 of scribe" in text.stdout
    applied = run_ouro("apply", "-y", *map(str, specs), env=family.env)
    assert applied.returncode == 1
    for name in ("late", "dead", "ghostly", "junky"):
        assert not (family.state / name).exists() and not (family.state / f"{name}.git").exists()


def test_verify_checks_the_link_and_finds_tampering_on_either_side(family: Family) -> None:
    spec = fork_spec(family.specs, "child", "scribe", 2)
    assert run_ouro("apply", "-y", str(spec), env=family.env).returncode == 0
    parent = lineage_paths(family.state, "scribe")

    # the parent's history rewritten from gen 2 on: the recorded commit is gone from it
    old = rewrite(parent.git_dir, parent.branch, 3, "memory/notes.md", b"forged\n")
    code, report = verify(family, spec)
    child = report["child"]
    assert code == 1 and child["ancestry"] == "broken", child
    assert {f["code"] for f in child["findings"]} == {"fork-parent-commit"}
    text = run_ouro("verify", str(spec), env=family.env).stdout
    assert "fork-parent-commit" in text and "ancestry: broken" in text
    repo = pygit2.Repository(str(parent.git_dir))
    repo.references[f"refs/heads/{parent.branch}"].set_target(old)
    assert verify(family, spec)[1]["child"]["ancestry"] == "linked"

    # the parent away: not present, not a finding
    away = family.root / "away"
    away.mkdir()
    for place in (parent.worktree, parent.git_dir, parent.observations):
        shutil.move(str(place), str(away / place.name))
    code, report = verify(family, spec)
    assert code == 0 and report["child"]["ancestry"] == "parent-not-present", report
    assert "parent not present" in run_ouro("verify", str(spec), env=family.env).stdout
    for place in (parent.worktree, parent.git_dir, parent.observations):
        shutil.move(str(away / place.name), str(place))

    # the child's seed rewritten (its memory forged), its history re-parented on it
    child_paths = lineage_paths(family.state, "child")
    rewrite(child_paths.git_dir, child_paths.branch, 0, "memory/notes.md", b"forged\n")
    code, report = verify(family, spec)
    assert code == 1 and "fork-seed-mismatch" in {
        f["code"] for f in report["child"]["findings"]}, report


def test_a_spec_without_a_fork_keeps_its_digest(tmp_path: Path) -> None:
    from reconciler.spec.load import load_specs

    spec = write_spec(tmp_path, "plain", 1)
    (loaded,) = load_specs([spec], state_dir=tmp_path / "state")
    # this document's digest as ouro computed it before spec.from (main at 6199889):
    # saved plans and the provenance of every generation keep their spec digest
    assert loaded.sha256 == "4b1e264885357df93b4bc82f73772977e860967f0ab6d19cbc94f06a6941a7a3"


def test_a_birth_cut_off_midway_is_made_again_and_leftovers_without_its_marker_are_kept(
        family: Family) -> None:
    """What a SIGKILL during a fork's birth leaves (its marker, a half-made git dir, a
    worktree folder, no observations): plan shows the fork to create, apply makes it
    whole and runs it, the marker goes. The same places without the marker are no birth
    of ouro's: refused, nothing removed."""
    spec = fork_spec(family.specs, "child", "scribe", 2)
    paths = lineage_paths(family.state, "child")
    marker = paths.git_dir.with_name(paths.git_dir.name + ".ouro-birth")

    def leftovers() -> None:
        paths.worktree.mkdir()
        (paths.worktree / "half.el").write_text(";; cut off\n")
        paths.git_dir.mkdir()
        (paths.git_dir / "HEAD").write_text("ref: refs/heads/lineage-child\n")

    leftovers()
    code, plan = plan_json(family, spec)
    (item,) = plan["lineages"]
    assert code == 1 and item["action"] == "refuse", item  # no marker: not ours
    assert (paths.worktree / "half.el").exists()
    applied = run_ouro("apply", "-y", str(spec), env=family.env)
    assert applied.returncode == 1 and (paths.worktree / "half.el").exists()

    marker.write_text("a fork's birth began here\n")
    code, plan = plan_json(family, spec)
    (item,) = plan["lineages"]
    assert code == 2 and item["action"] == "create", item
    applied = run_ouro("apply", "-y", str(spec), env=family.env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert not marker.exists() and not (paths.worktree / "half.el").exists()
    assert_invariant(paths, 1)
    code, report = verify(family, spec)
    assert code == 0 and report["child"]["ancestry"] == "linked", report
