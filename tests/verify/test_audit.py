"""The audit on real repositories: each finding provoked, the fixtures, unknown-not-guilty.

Every case builds a sound lineage (tests/verify/builder.py, written from
docs/lineage-contract.md), damages it the way the case says, and expects EXACTLY these
findings: a missing one is a blind spot, an extra one a false accusation.
"""

from __future__ import annotations

import json
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import LineagePaths
from reconciler.state.audit import CODES, audit_lineage, restored_organism
from tests.verify.builder import (
    SEED,
    SIG,
    Lineage,
    commit_of,
    first_parent_chain,
    target,
    tree_of,
)

LETHAL = b'(message "lethal")\n(kill-emacs 3)\n'
GROWN = SEED + b'(message "grown")\n'


def sound(root: Path, name: str = "t") -> Lineage:
    """gen 1 no-change; gen 2 changes organism and a file; an external edit makes the
    body lethal; gen 3 dies and restores; gen 4 no-change (4 generations, 4 observations)."""
    lineage = Lineage.create(root, name)
    lineage.no_change()
    lineage.changed({"organism.el": GROWN, "notes/a.txt": b"a\n"})
    lineage.external_edit({"organism.el": LETHAL})
    lineage.died()
    lineage.no_change()
    return lineage


def found(lineage: Lineage) -> set[tuple[str, int | None]]:
    result = audit_lineage(lineage.paths, lineage.name)
    assert result.status != "unknown", result
    assert all(f.lineage == lineage.name for f in result.findings)
    return {(f.code, f.generation) for f in result.findings}


# ------------------------------------------------------------------ damage, one per row


def rewrite_history(lineage: Lineage) -> None:
    lineage.rewrite_history_from(2, {"tampered.txt": b"x\n"})


def delete_observation(lineage: Lineage) -> None:
    lineage.observe("observe: remove gen 3", {formats.observation_path(3): None})


def edit_journal_heading(lineage: Lineage) -> None:
    journal = lineage.files["journal.md"].replace(b"## gen 2 ", b"## gen 7 ")
    lineage.external_edit({"journal.md": journal})


def git_file_in_generation(lineage: Lineage) -> None:
    lineage.changed({"lib/.git/config": b"[core]\n"})


def git_top_level_in_generation(lineage: Lineage) -> None:
    lineage.changed({".git": b"gitdir: /elsewhere\n"})


def overspend(lineage: Lineage) -> None:
    lineage.no_change(calls=[Lineage.call(5, accounted="0.60"), Lineage.call(5, accounted="0.41")])


def overspend_by_kept_reservation(lineage: Lineage) -> None:
    lineage.no_change(calls=[Lineage.call(5, accounted=None, reserved="1.01")])


def metadata_changed_by_hand(lineage: Lineage) -> None:
    lineage.external_edit({".ouroboros-lineage.json": b"{}"})


def metadata_changed_in_generation(lineage: Lineage) -> None:
    lineage.changed({".ouroboros-lineage.json": b"{}", "x.txt": b"x"})


def wrong_restored_body(lineage: Lineage) -> None:
    lineage.external_edit({"organism.el": LETHAL + b";; again\n"})
    lineage.died(body=LETHAL + b";; again\n")


def restored_to_the_seed_instead(lineage: Lineage) -> None:
    lineage.external_edit({"organism.el": LETHAL + b";; again\n"})
    lineage.died(body=SEED)


def death_keeps_writes(lineage: Lineage) -> None:
    lineage.died(extra={"left-behind.txt": b"speculative\n"})


def journal_status_mismatch(lineage: Lineage) -> None:
    n = lineage.generation + 1
    entry = formats.journal_entry(
        n, "changed", "2026-11-29T16:00:00+00:00", detail="organism unchanged; 1 other paths"
    )
    journal = formats.append_entry(lineage.files["journal.md"].decode(), entry).encode()
    oid = lineage.commit(formats.subject_no_change(n), {"journal.md": journal})
    lineage.generation = n
    lineage.write_observation(n, lineage.record(n, "no-change", oid, calls=[]), "no-change")


def journal_entry_missing(lineage: Lineage) -> None:
    n = lineage.generation + 1
    oid = lineage.commit(
        formats.subject_no_change(n), {"journal.md": lineage.files["journal.md"] + b"\nnothing\n"}
    )
    lineage.generation = n
    lineage.write_observation(n, lineage.record(n, "no-change", oid, calls=[]), "no-change")


def journal_rewritten_by_generation(lineage: Lineage) -> None:
    n = lineage.generation + 1
    entry = formats.journal_entry(n, "no-change", "2026-11-29T16:00:00+00:00")
    earlier = lineage.files["journal.md"].replace(b"lethal", b"fine")
    oid = lineage.commit(formats.subject_no_change(n), {"journal.md": earlier + entry.encode()})
    lineage.generation = n
    lineage.write_observation(n, lineage.record(n, "no-change", oid, calls=[]), "no-change")


def generation_misnumbered(lineage: Lineage) -> None:
    n = lineage.generation + 1
    entry = formats.journal_entry(n, "no-change", "2026-11-29T16:00:00+00:00")
    journal = formats.append_entry(lineage.files["journal.md"].decode(), entry).encode()
    oid = lineage.commit(formats.subject_no_change(n + 3), {"journal.md": journal})
    lineage.generation = n
    lineage.write_observation(n, lineage.record(n, "no-change", oid, calls=[]), "no-change")


def generation_subject_unknown(lineage: Lineage) -> None:
    n = lineage.generation + 1
    entry = formats.journal_entry(n, "no-change", "2026-11-29T16:00:00+00:00")
    journal = formats.append_entry(lineage.files["journal.md"].decode(), entry).encode()
    oid = lineage.commit(f"gen {n}: exploded", {"journal.md": journal})
    lineage.generation = n
    lineage.write_observation(n, lineage.record(n, "no-change", oid, calls=[]), "no-change")


def observation_duplicate(lineage: Lineage) -> None:
    record = lineage.observation_record(2)
    lineage.observe("observe: copy", {"generations/00002.json": json.dumps(record).encode()})


def observation_extra(lineage: Lineage) -> None:
    record = lineage.observation_record(4)
    record["generation"] = 9
    lineage.observe(
        "observe: gen 9 no-change", {formats.observation_path(9): json.dumps(record).encode()}
    )


def observation_names_an_earlier_commit(lineage: Lineage) -> None:
    n = lineage.generation + 1
    lineage.no_change(observe=False)
    lineage.write_observation(
        n, lineage.record(n, "no-change", lineage.commits[1], calls=[]), "no-change"
    )


def observation_names_a_foreign_commit(lineage: Lineage) -> None:
    n = lineage.generation + 1
    lineage.no_change(observe=False)
    record = lineage.record(n, "no-change", lineage.commits[n], calls=[])
    record["lineage_commit"] = "c" * 40
    lineage.write_observation(n, record, "no-change")


def observation_outcome_disagrees(lineage: Lineage) -> None:
    n = lineage.generation + 1
    lineage.external_edit({"organism.el": LETHAL})
    oid = lineage.died(observe=False)
    lineage.write_observation(n, lineage.record(n, "no-change", oid, calls=[]), "no-change")


def observation_edited_after_the_fact(lineage: Lineage) -> None:
    record = lineage.observation_record(2)
    record["duration_ms"] = 1
    lineage.rewrite_observation(2, record)


def observation_metadata_edited(lineage: Lineage) -> None:
    lineage.observe("observe: edit", {"metadata.json": b"{}"})


def observations_repo_deleted(lineage: Lineage) -> None:
    shutil.rmtree(lineage.paths.observations)


def observations_folder_inside_another_repository(lineage: Lineage) -> None:
    shutil.rmtree(lineage.paths.observations)
    lineage.paths.observations.mkdir()
    parent = pygit2.init_repository(str(lineage.paths.observations.parent))
    tree = parent.TreeBuilder().write()
    parent.create_commit(
        f"refs/heads/{lineage.paths.observation_branch}", SIG, SIG, "x\n", tree, []
    )


CASES: list[tuple[str, Callable[[Lineage], None], set[tuple[str, int | None]]]] = [
    ("sound", lambda lineage: None, set()),
    (
        "rewritten-history",
        rewrite_history,
        {("rewritten-history", 2), ("rewritten-history", 3), ("rewritten-history", 4)},
    ),
    (
        "deleted-observation",
        delete_observation,
        {("observation-missing", 3), ("observation-rewritten", 3)},
    ),
    ("edited-journal-heading", edit_journal_heading, {("journal-headings", 2)}),
    ("git-path-in-subfolder", git_file_in_generation, {("git-path-added", 5)}),
    ("git-path-top-level", git_top_level_in_generation, {("git-path-added", 5)}),
    ("overspend", overspend, {("overspend", 5)}),
    ("overspend-kept-reservation", overspend_by_kept_reservation, {("overspend", 5)}),
    ("metadata-changed-by-hand", metadata_changed_by_hand, {("metadata-changed", None)}),
    ("metadata-changed-in-generation", metadata_changed_in_generation, {("metadata-changed", 5)}),
    ("wrong-restored-body", wrong_restored_body, {("restore-mismatch", 5)}),
    ("restored-too-far", restored_to_the_seed_instead, {("restore-mismatch", 5)}),
    ("death-keeps-writes", death_keeps_writes, {("death-kept-writes", 5)}),
    ("journal-status-mismatch", journal_status_mismatch, {("journal-status-mismatch", 5)}),
    (
        "journal-entry-missing",
        journal_entry_missing,
        {("journal-entry-missing", 5), ("journal-headings", 5)},
    ),
    ("journal-rewritten", journal_rewritten_by_generation, {("journal-not-append", 5)}),
    ("generation-misnumbered", generation_misnumbered, {("generation-number", 5)}),
    ("generation-subject-unknown", generation_subject_unknown, {("generation-subject", 5)}),
    ("observation-duplicate", observation_duplicate, {("observation-duplicate", 2)}),
    ("observation-extra", observation_extra, {("observation-extra", 9)}),
    (
        "observation-names-earlier-commit",
        observation_names_an_earlier_commit,
        {("observation-commit-mismatch", 5)},
    ),
    (
        "observation-names-foreign-commit",
        observation_names_a_foreign_commit,
        {("rewritten-history", 5)},
    ),
    (
        "observation-outcome-disagrees",
        observation_outcome_disagrees,
        {("observation-status-mismatch", 5)},
    ),
    ("observation-edited", observation_edited_after_the_fact, {("observation-rewritten", 2)}),
    (
        "observation-metadata-edited",
        observation_metadata_edited,
        {("observation-rewritten", None), ("observation-metadata-invalid", None)},
    ),
    ("observations-repo-deleted", observations_repo_deleted, {("observations-missing", None)}),
    (
        "observations-folder-inside-another-repository",
        observations_folder_inside_another_repository,
        {("observations-missing", None)},
    ),
]


@pytest.mark.parametrize(
    ("damage", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_damage_is_found_exactly(
    tmp_path: Path, damage: Callable[[Lineage], None], expected: set[tuple[str, int | None]]
) -> None:
    lineage = sound(tmp_path)
    damage(lineage)
    assert found(lineage) == expected


# ------------------------------------------------------------------ observation field types


def _set(key: str, value: object) -> Callable[[dict[str, object]], None]:
    def change(record: dict[str, object]) -> None:
        record[key] = value

    return change


def _drop(key: str) -> Callable[[dict[str, object]], None]:
    def change(record: dict[str, object]) -> None:
        del record[key]

    return change


def _budget(value: object) -> Callable[[dict[str, object]], None]:
    def change(record: dict[str, object]) -> None:
        record["constraints"]["model"]["spending_budget"]["amount"] = value  # type: ignore[index]

    return change


def _call(key: str, value: object) -> Callable[[dict[str, object]], None]:
    def change(record: dict[str, object]) -> None:
        record["model_calls"] = [{**Lineage.call(2), key: value}]

    return change


INVALID = [
    ("schema", _set("schema", "ouroboros-generation-observation/v0")),
    ("generation-string", _set("generation", "2")),
    ("generation-bool", _set("generation", True)),
    ("generation-other-number", _set("generation", 3)),
    ("duration-negative", _set("duration_ms", -1)),
    ("duration-float", _set("duration_ms", 1.5)),
    ("outcome-unknown", _set("outcome", "exploded")),
    ("lineage-commit-short", _set("lineage_commit", "abc123")),
    ("lineage-commit-missing", _drop("lineage_commit")),
    ("started-at-missing", _drop("started_at")),
    ("model-calls-not-list", _set("model_calls", {"a": 1})),
    ("model-call-not-object", _set("model_calls", ["call"])),
    ("accounted-float", _call("accounted_usd", 0.5)),
    ("accounted-negative", _call("accounted_usd", "-1")),
    ("accounted-nan", _call("accounted_usd", "NaN")),
    ("http-status-string", _call("http_status", "200")),
    ("budget-missing", _drop("constraints")),
    ("budget-float", _budget(1.0)),
    ("budget-garbage", _budget("one dollar")),
    ("stderr-tail-number", _set("stderr_tail", 5)),
    ("provider-number", _set("provider", 5)),
]


@pytest.mark.parametrize("change", [c[1] for c in INVALID], ids=[c[0] for c in INVALID])
def test_observation_field_types_are_checked(
    tmp_path: Path, change: Callable[[dict[str, object]], None]
) -> None:
    lineage = sound(tmp_path)
    record = lineage.observation_record(2)
    change(record)
    # written as a fresh observation repo history, so only the content is at stake
    shutil.rmtree(lineage.paths.observations)
    rebuilt = Lineage.create(tmp_path / "again", "t")
    lineage.observations = rebuilt.observations
    lineage.paths = LineagePaths(
        lineage.paths.worktree,
        lineage.paths.git_dir,
        rebuilt.paths.observations,
        lineage.paths.branch,
        lineage.paths.observation_branch,
    )
    for n in range(1, 5):
        original = (
            record
            if n == 2
            else json.loads(
                json.dumps(lineage.record(n, "no-change", lineage.commits[n], calls=[]))
            )
        )
        if n == 3:
            original["outcome"] = "process_exit"
        lineage.write_observation(n, original, "x")
    assert found(lineage) == {("observation-invalid", 2)}


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[]", b'{"schema": NaN}', b"\xff\xfe"],
    ids=["not-json", "array", "nan", "not-utf8"],
)
def test_an_unparseable_observation_is_invalid_not_unknown(tmp_path: Path, raw: bytes) -> None:
    lineage = sound(tmp_path)
    lineage.rewrite_observation(4, None, raw=raw)
    assert found(lineage) == {("observation-invalid", 4), ("observation-rewritten", 4)}


def test_spend_exactly_at_the_budget_is_within_it(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    lineage.no_change(calls=[Lineage.call(5, accounted="0.50"), Lineage.call(5, accounted="0.50")])
    lineage.budget = "0.10"
    lineage.no_change(calls=[Lineage.call(6, accounted="0.10")])
    assert found(lineage) == set()


def test_each_generation_is_held_to_its_own_recorded_budget(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    lineage.budget = "0.10"
    lineage.no_change(calls=[Lineage.call(5, accounted="0.11")])
    lineage.budget = "5.00"
    lineage.no_change(calls=[Lineage.call(6, accounted="4.99")])
    assert found(lineage) == {("overspend", 5)}


# ------------------------------------------------------------------ metadata and the root


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"seed_subject": "initial"}, {("root-subject", None)}),
        (
            {"lineage_meta": {"seed_sha256": "0" * 64}},
            {("seed-mismatch", None), ("metadata-disagree", None)},
        ),
        ({"lineage_meta": {"instrument_commit": "d" * 40}}, {("metadata-disagree", None)}),
        ({"observation_meta": {"instrument_fingerprint": "e" * 64}}, {("metadata-disagree", None)}),
        (
            {"observation_meta": {"lineage_branch": "lineage-other"}},
            {("observation-branch-mismatch", None)},
        ),
        (
            {"observation_meta": {"schema": "ouroboros-observations/v0"}},
            {("observation-metadata-invalid", None)},
        ),
        (
            {"lineage_meta": {"schema": "ouroboros-lineage/v1"}},
            {("lineage-metadata-invalid", None)},
        ),
        ({"lineage_meta": {"instrument_commit": "HEAD"}}, {("lineage-metadata-invalid", None)}),
        ({"metadata_raw": b"{not json"}, {("lineage-metadata-invalid", None)}),
        ({"metadata_raw": b""}, {("lineage-metadata-missing", None)}),
    ],
    ids=[
        "root-subject",
        "seed-sha",
        "instrument-commit",
        "fingerprint",
        "observation-branch",
        "observation-schema",
        "lineage-schema",
        "commit-not-an-id",
        "metadata-not-json",
        "metadata-missing",
    ],
)
def test_metadata_and_root_agree(
    tmp_path: Path, options: dict[str, object], expected: set[tuple[str, int | None]]
) -> None:
    lineage = Lineage.create(tmp_path, "t", **options)  # type: ignore[arg-type]
    lineage.no_change()
    assert found(lineage) == expected


def test_observation_metadata_missing(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    observations = lineage.observations
    ref = observations.references[f"refs/heads/{lineage.paths.observation_branch}"]
    tree = observations[ref.target].tree
    builder = observations.TreeBuilder(tree)
    builder.remove("metadata.json")
    observations.create_commit(
        ref.name, SIG, SIG, "observe: gen 4 no-change\n", builder.write(), [ref.target]
    )
    # the rewrite itself is history: the metadata file disappeared after it was written
    assert found(lineage) == {
        ("observation-metadata-missing", None),
        ("observation-rewritten", None),
    }


# ------------------------------------------------------------------ deaths and the restored body


@pytest.mark.parametrize(
    ("organisms", "parent_index", "expected"),
    [
        (["s"], 0, "s"),  # only the root set it: nothing to restore
        (["s", "s", "L"], 2, "s"),  # external edit made it lethal
        (["s", "g", "g", "L"], 3, "g"),  # restores the grown body, not the seed
        (["s", "L", "s"], 2, "L"),  # the most recent change was itself a restore
        (["s", "A", "B", "A"], 3, "B"),  # back to an earlier value still counts as a change
        ([None, None], 1, None),  # never an organism: nothing to restore
        (["A", None, "A"], 2, "A"),  # the kernel keeps A: a missing body is not a body
        (["A", "B", None], 2, "B"),  # a death after organism.el went missing brings it back
        (["A", None], 1, "A"),
        ([None, "A", None, "A"], 3, "A"),
    ],
    ids=["root-only", "edit", "grown", "after-restore", "a-b-a", "none", "a-none-a",
         "a-b-none", "a-none", "none-a-none-a"],
)
def test_restored_organism_rule(
    organisms: list[str | None], parent_index: int, expected: str | None
) -> None:
    assert restored_organism(organisms, parent_index) == expected  # type: ignore[arg-type]


def test_consecutive_deaths_follow_the_rule(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    lineage.died()  # restores the lethal body again: the literal rule, as the original does
    lineage.died()
    assert lineage.files["organism.el"] == GROWN
    assert found(lineage) == set()


# ------------------------------------------------------------------ unknown is not guilty


def _corrupt_an_object(lineage: Lineage) -> None:
    journal_blob = (lineage.repo[lineage.commits[2]].tree / "journal.md").id
    hexid = str(journal_blob)
    path = lineage.paths.git_dir / "objects" / hexid[:2] / hexid[2:]
    path.chmod(0o644)
    path.write_bytes(b"garbage")


def _delete_an_object(lineage: Lineage) -> None:
    hexid = str(lineage.commits[2])
    (lineage.paths.git_dir / "objects" / hexid[:2] / hexid[2:]).unlink()


def _no_git_dir(lineage: Lineage) -> None:
    shutil.rmtree(lineage.paths.git_dir)


def _no_branch(lineage: Lineage) -> None:
    lineage.repo.references[f"refs/heads/{lineage.paths.branch}"].rename("refs/heads/elsewhere")


def _git_dir_is_a_folder_inside_another_repository(lineage: Lineage) -> None:
    shutil.rmtree(lineage.paths.git_dir)
    lineage.paths.git_dir.mkdir()
    pygit2.init_repository(str(lineage.paths.git_dir.parent))  # a repository further up


def _git_dir_is_a_file(lineage: Lineage) -> None:
    shutil.rmtree(lineage.paths.git_dir)
    lineage.paths.git_dir.write_text("not a repository")


@pytest.mark.parametrize("damage", [_corrupt_an_object, _delete_an_object],
                         ids=["corrupt-object", "missing-object"])
def test_an_unreadable_object_is_a_finding_and_the_only_one(
    tmp_path: Path, damage: Callable[[Lineage], None]
) -> None:
    """Every reachable object is read (as git fsck does): a damaged one is no guess, but
    nothing else is judged on a history that cannot be read whole."""
    lineage = sound(tmp_path)
    lineage.rewrite_observation(2, None, raw=b"also damaged")  # would be a finding if readable
    damage(lineage)
    result = audit_lineage(lineage.paths, lineage.name)
    assert result.status == "findings"
    assert [f.code for f in result.findings] == ["object-unreadable"]


def test_an_unreached_corrupt_blob_is_found_too(tmp_path: Path) -> None:
    """A blob no other check reads (an old organism body) is read all the same."""
    lineage = sound(tmp_path)
    assert found(lineage) == set()
    seed = commit_of(lineage.repo, lineage.commits[1]).parents[0]
    blob = (seed.tree / "organism.el").id
    hexid = str(blob)
    path = lineage.paths.git_dir / "objects" / hexid[:2] / hexid[2:]
    path.chmod(0o644)
    inner = zlib.decompress(path.read_bytes())
    path.write_bytes(zlib.compress(inner[:-1] + bytes([inner[-1] ^ 1])))
    assert [f.code for f in audit_lineage(lineage.paths, lineage.name).findings] == [
        "object-unreadable"]


@pytest.mark.parametrize(
    "damage",
    [
        _no_git_dir,
        _no_branch,
        _git_dir_is_a_file,
        _git_dir_is_a_folder_inside_another_repository,
    ],
    ids=[
        "no-git-dir",
        "no-branch",
        "git-dir-is-a-file",
        "git-dir-inside-another-repository",
    ],
)
def test_an_unreadable_history_is_unknown_with_no_findings(
    tmp_path: Path, damage: Callable[[Lineage], None]
) -> None:
    lineage = sound(tmp_path)
    lineage.rewrite_observation(2, None, raw=b"also damaged")  # would be a finding if readable
    damage(lineage)
    result = audit_lineage(lineage.paths, lineage.name)
    assert result.status == "unknown"
    assert result.findings == ()
    assert result.exception_class is not None and result.exception_class.isidentifier()


# ------------------------------------------------------------------ the shared fixtures


def fixture_paths(worktree: Path) -> LineagePaths:
    root = worktree.parent
    return LineagePaths(
        worktree,
        root / "fixture.git",
        root / "fixture.observations",
        "lineage-fixture",
        "observations/lineage-fixture",
    )


def test_the_original_instruments_lineage_passes(original_lineage: Path) -> None:
    result = audit_lineage(fixture_paths(original_lineage), "fixture")
    assert (result.status, result.findings) == ("consistent", ())
    assert (result.generations, result.observations, result.commits) == (5, 5, 8)


def test_the_original_fixtures_death_restores_the_body_before_the_external_edit(
    original_lineage: Path,
) -> None:
    repo = pygit2.Repository(str(original_lineage.parent / "fixture.git"))
    chain = first_parent_chain(repo, "lineage-fixture")
    organisms = [(c.tree / "organism.el").id for c in chain]
    death = next(i for i, c in enumerate(chain) if c.message.startswith("gen 4: died"))
    edit = chain[death - 1]
    assert edit.message.startswith("external edit") and organisms[death - 1] != organisms[0]
    assert restored_organism(organisms, death - 1) == organisms[death] == organisms[0]


def test_a_wrong_body_in_the_original_fixture_is_found(original_lineage: Path) -> None:
    """Rewrite the fixture's death to keep the lethal body: the rule itself is at stake."""
    repo = pygit2.Repository(str(original_lineage.parent / "fixture.git"))
    ref = repo.references["refs/heads/lineage-fixture"]
    root, *chain = first_parent_chain(repo, "lineage-fixture")
    parent = root.id
    lethal = (chain[4].tree / "organism.el").id  # the external edit's body
    for old in chain:
        tree = old.tree
        if old.message.startswith("gen 4: died") or old.message.startswith("gen 5"):
            builder = repo.TreeBuilder(tree)
            builder.insert("organism.el", lethal, pygit2.enums.FileMode.BLOB)
            tree = tree_of(repo, builder.write())
        parent = repo.create_commit(None, old.author, old.committer, old.message, tree.id, [parent])
    ref.set_target(parent)
    codes = {
        (f.code, f.generation) for f in audit_lineage(fixture_paths(original_lineage)).findings
    }
    assert ("restore-mismatch", 4) in codes


def test_the_sample_bundle_reports_without_crashing(sample_lineage: Path) -> None:
    paths = LineagePaths(
        sample_lineage,
        sample_lineage / ".git",
        sample_lineage.parent / "sample.observations",
        "main",
        "observations/main",
    )
    result = audit_lineage(paths, "sample")
    assert result.status == "findings"
    assert result.generations == 5 and result.commits == 10
    assert {f.code for f in result.findings} == {"lineage-metadata-missing", "observations-missing"}


def test_the_sample_bundle_on_a_branch_it_does_not_have_is_unknown(sample_lineage: Path) -> None:
    paths = LineagePaths(
        sample_lineage,
        sample_lineage / ".git",
        sample_lineage.parent / "sample.observations",
        "lineage-sample",
        "observations/lineage-sample",
    )
    result = audit_lineage(paths, "sample")
    assert (result.status, result.findings) == ("unknown", ())


def test_every_code_has_a_description_and_is_stable() -> None:
    assert all(code == code.lower() and " " not in code for code in CODES)
    assert all(CODES[code] for code in CODES)


def test_the_codes_are_exactly_the_findings_the_audit_can_make() -> None:
    """Every code is described, and every description is a finding the audit makes: the
    `find("...")` calls of reconciler/state/audit.py (no dead code, no bare code)."""
    import ast

    import reconciler.state.audit as audit_module

    tree = ast.parse(Path(audit_module.__file__).read_text(encoding="utf-8"))
    made = {
        node.args[0].value for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == "find" and node.args and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }
    assert made == set(CODES)


def test_the_audit_writes_nothing(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    overspend(lineage)

    def snapshot() -> dict[str, bytes]:
        return {
            str(path): path.read_bytes()
            for place in (lineage.paths.git_dir, lineage.paths.observations)
            for path in sorted(place.rglob("*"))
            if path.is_file()
        }

    before = snapshot()
    audit_lineage(lineage.paths, lineage.name)
    assert snapshot() == before


# ------------------------------------------------------------------ the linear shortcuts
# verify checks that each version of the journal and of the observations' folder is a
# prefix of the newest one by hashing prefixes; an edit that is later undone leaves the
# newest version as it should be, so it must still be found (by the exact check).


def test_a_journal_edited_then_restored_is_found(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    honest = lineage.files["journal.md"]
    journal_rewritten_by_generation(lineage)  # gen 5 rewrites gen 3's stderr
    n = lineage.generation + 1
    entry = formats.journal_entry(5, "no-change", "2026-11-29T16:00:00+00:00")
    restored = honest + entry.encode()  # gen 6 puts the honest text back
    entry6 = formats.journal_entry(n, "no-change", "2026-11-29T16:00:01+00:00")
    oid = lineage.commit(formats.subject_no_change(n), {"journal.md": restored + entry6.encode()})
    lineage.generation = n
    lineage.write_observation(n, lineage.record(n, "no-change", oid, calls=[]), "no-change")
    assert {("journal-not-append", 5), ("journal-not-append", 6)} <= found(lineage)


def test_an_observation_edited_then_restored_is_found(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    honest = lineage.observation_record(2)
    lineage.rewrite_observation(2, {**honest, "outcome": "signal"})
    lineage.rewrite_observation(2, honest)
    assert ("observation-rewritten", 2) in found(lineage)


def test_a_long_sound_history_is_consistent(tmp_path: Path) -> None:
    """Many generations through the shortcut: no false finding."""
    lineage = sound(tmp_path)
    for _ in range(40):
        lineage.no_change()
    result = audit_lineage(lineage.paths, lineage.name)
    assert (result.status, result.generations) == ("consistent", 44)


def test_an_old_generations_folder_that_is_corrupt_is_found(tmp_path: Path) -> None:
    """An earlier version of the observations' generations/ is not walked entry by entry
    (its entries are the newest version's), but it is still read whole: damage is found."""
    lineage = sound(tmp_path)
    ref = lineage.observations.references[f"refs/heads/{lineage.paths.observation_branch}"]
    head = commit_of(lineage.observations, target(ref))
    older = head.parents[0].parents[0]
    folder = (older.tree / "generations").id
    hexid = str(folder)
    path = lineage.paths.observations / ".git" / "objects" / hexid[:2] / hexid[2:]
    path.chmod(0o644)
    inner = zlib.decompress(path.read_bytes())
    path.write_bytes(zlib.compress(inner[:-1] + bytes([inner[-1] ^ 1])))
    assert "object-unreadable" in {f.code for f in audit_lineage(lineage.paths,
                                                                  lineage.name).findings}
