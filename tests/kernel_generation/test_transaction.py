"""The transaction with a fake sandbox and broker: publication, deaths, journal,
observation fields, preflight refusals, compare-and-swap. (Real sandboxes: test_real.py.)"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import Ceilings, Identity, ModelConfig
from reconciler.kernel.base.errors import (
    CeilingError,
    ConcurrentChangeError,
    DriftError,
    PreflightError,
    ProviderConfigError,
    RecoveryError,
)
from reconciler.kernel.transaction import publish
from reconciler.kernel.transaction.generation import GenerationOutcome, check_extendable
from reconciler.state import summaries
from tests.kernel_generation.helpers import Fake, Lineage, git, subjects

Run = Callable[..., GenerationOutcome]
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


def state(lineage: Lineage) -> tuple[str, str, str, bool]:
    """Everything a refused generation must leave untouched."""
    return (
        git(lineage.worktree, "rev-parse", "HEAD"),
        git(lineage.observations, "rev-parse", "HEAD"),
        git(lineage.worktree, "status", "--porcelain", "--ignored"),
        publish.marker_path(lineage.paths).exists(),
    )


# ---------------------------------------------------------------- outcomes


def test_no_change_has_no_zero_zero(born: Lineage, fake: Fake, run_fake: Run) -> None:
    outcome = run_fake()
    assert (outcome.status, outcome.outcome) == ("no-change", "no-change")
    assert subjects(born.worktree) == ["seed", "gen 1: no-change"]
    assert re.fullmatch(rf"\n## gen 1 — no-change — {STAMP}\n", born.journal())
    assert "+0/-0" not in born.journal()
    record = born.observation(1)
    assert record["outcome"] == "no-change"
    assert git(born.observations, "log", "-1", "--format=%s").strip() == "observe: gen 1 no-change"


def test_other_paths_change_wording(born: Lineage, fake: Fake, run_fake: Run) -> None:
    fake.files = {"organism.el": born.organism(), "state.el": "(:generation 1)\n"}
    outcome = run_fake()
    assert outcome.outcome == "changed — organism unchanged; 1 other paths"
    assert subjects(born.worktree)[-1] == "gen 1: changed (organism unchanged; 1 other paths)"
    assert "changed — organism unchanged; 1 other paths — " in born.journal()


def test_organism_change_counts_lines_and_paths(born: Lineage, fake: Fake, run_fake: Run) -> None:
    seed_lines = born.organism().splitlines(keepends=True)
    body = "".join(seed_lines[:-1]) + ";; one\n;; two\n"  # last line replaced by two
    fake.files = {"organism.el": body, "notes/a.txt": "a\n"}
    outcome = run_fake()
    assert outcome.outcome == "changed — organism +2/-1; 2 paths"
    assert subjects(born.worktree)[-1] == "gen 1: changed (organism +2/-1; 2 paths)"
    assert (born.worktree / "notes" / "a.txt").read_text() == "a\n"
    assert git(born.worktree, "status", "--porcelain", "--ignored") == ""


def test_gitignore_cannot_hide_published_files(born: Lineage, fake: Fake, run_fake: Run) -> None:
    fake.files = {"organism.el": born.organism(), ".gitignore": "hidden.txt\n*.log\n",
                  "hidden.txt": "still hereditary\n", "deep/x.log": "kept\n"}
    run_fake()
    tracked = git(born.worktree, "ls-files").splitlines()
    assert {".gitignore", "hidden.txt", "deep/x.log"} <= set(tracked)
    assert born.observation(1)["published_files"] == 4


def test_removed_files_leave_the_worktree(born: Lineage, fake: Fake, run_fake: Run) -> None:
    fake.files = {"organism.el": born.organism(), "a.txt": "a"}
    run_fake()
    fake.files = {"organism.el": born.organism()}
    outcome = run_fake()
    assert outcome.outcome == "changed — organism unchanged; 1 other paths"
    assert not (born.worktree / "a.txt").exists()


@pytest.mark.parametrize(
    ("exit_status", "oom_kills", "result", "wall", "outcome"),
    [
        pytest.param(9, 0, "exited", False, "process_exit", id="plain-exit"),
        pytest.param(137, 1, "oom-kill", False, "cgroup_oom", id="oom-kill"),
        pytest.param(137, 0, "killed", False, "signal", id="other-signal"),
        pytest.param(137, 0, "killed", True, "wall_timeout", id="wall-limit"),
    ],
)
def test_death_outcomes(born: Lineage, fake: Fake, run_fake: Run, exit_status: int,
                        oom_kills: int, result: str, wall: bool, outcome: str) -> None:
    fake.exit_status, fake.oom_kills, fake.result, fake.wall_timeout = (
        exit_status, oom_kills, result, wall)
    got = run_fake()
    assert (got.status, got.outcome, got.exit_status) == ("died", outcome, exit_status)
    assert subjects(born.worktree)[-1] == (
        f"gen 1: died (exit {exit_status}); staged writes discarded")
    record = born.observation(1)
    assert record["outcome"] == outcome
    assert record["exit_status"] == exit_status
    assert record["oom_kills"] == oom_kills
    assert record["systemd_result"] == result
    assert record["published_files"] is None and record["published_bytes"] is None
    assert git(born.observations, "log", "-1", "--format=%s").strip() == (
        f"observe: gen 1 {outcome}")


def test_death_journal_keeps_last_five_lines_observer_twenty(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    lines = ["Error: wrong-type-argument (stringp nil)"] + [f"  frame-{i}()" for i in range(24)]
    fake.exit_status, fake.stderr = 255, ("\n".join(lines) + "\n").encode()
    fake.files = {"unpublished.txt": "must not appear"}
    run_fake()
    journal = born.journal()
    heading = re.escape("## gen 1 — died — ")
    tail = "".join(f"  frame-{i}()\n" for i in range(19, 24))
    assert re.fullmatch(rf"\n{heading}{STAMP}\nexit 255\n~~~\n{re.escape(tail)}~~~\n", journal)
    record = born.observation(1)
    assert record["stderr_tail"] == "\n".join(lines[-20:])
    assert not (born.worktree / "unpublished.txt").exists()


def test_hostile_archive_with_exit_zero_is_a_decoder_death(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    fake.archive = buffer.getvalue()
    outcome = run_fake()
    assert (outcome.status, outcome.outcome, outcome.exit_status) == (
        "died", "decoder_rejection", 0)
    assert subjects(born.worktree)[-1] == "gen 1: died (exit 0); staged writes discarded"
    record = born.observation(1)
    assert record["outcome"] == "decoder_rejection"
    assert record["rejection"]["message"].startswith("kernel: decoder")
    assert record["result_archive_bytes"] == len(fake.archive)
    assert "exit 0\n~~~\n~~~\n" in born.journal()


def test_death_restores_organism_before_its_last_change(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    seed = born.organism()
    fake.files = {"organism.el": seed + ";; v1\n"}
    run_fake()
    fake.files = {"organism.el": seed + ";; v2\n"}
    run_fake()
    fake.files, fake.exit_status = None, 1
    run_fake()
    assert born.organism() == seed + ";; v1\n"  # the body before v2, the last change


def test_death_after_lethal_external_edit_restores_the_previous_body(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    seed = born.organism()
    (born.worktree / "organism.el").write_text("(kill-emacs 3)\n")
    fake.exit_status, fake.stderr = 3, b"lethal\n"
    outcome = run_fake()
    assert outcome.external_edit is not None
    assert subjects(born.worktree) == [
        "seed", "external edit", "gen 1: died (exit 3); staged writes discarded"]
    assert born.organism() == seed
    assert born.observation(1)["stderr_tail"] == "lethal"


def test_restore_rule_matches_the_original_fixture(tmp_path: Path) -> None:
    from tests.conftest import _git, shared_dir

    worktree = tmp_path / "fixture"
    _git("clone", "-q", f"--separate-git-dir={tmp_path / 'fixture.git'}", "-b",
         "lineage-fixture", str(shared_dir() / "fixtures" / "original-lineage.bundle"),
         str(worktree))
    repo = pygit2.Repository(str(tmp_path / "fixture.git"))
    died = repo.revparse_single("lineage-fixture~1")
    assert isinstance(died, pygit2.Commit)
    assert died.message.startswith("gen 4: died")
    parent = died.parents[0]
    restored = publish.restored_organism(repo, parent)
    assert restored is not None and restored[0] == died.tree["organism.el"].id


def test_input_excludes_kernel_owned_files_and_journal_goes_to_kernel(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    fake.files = {"organism.el": born.organism(), "sub/x.txt": "x"}
    run_fake()
    run_fake()
    given = fake.seen[-1]["input"]
    with tarfile.open(fileobj=io.BytesIO(given)) as tar:
        names = sorted(m.name for m in tar.getmembers())
    assert names == ["organism.el", "sub", "sub/x.txt"]
    assert fake.seen[-1]["journal"] == (born.worktree / "journal.md").read_bytes().split(
        b"\n## gen 2")[0]


# ---------------------------------------------------------------- observation fields


def test_observation_record_has_every_contract_field_in_order(
    born: Lineage, fake: Fake, run_fake: Run, original_lineage: Path
) -> None:
    fake.calls = [{"schema": "ouroboros-model-call/v1", "http_status": 200,
                   "accounted_usd": "0.25"}]
    fake.files = {"organism.el": born.organism() + ";; x\n"}
    outcome = run_fake()
    record = born.observation(1)
    written = original_lineage.parent / "fixture.observations" / "generations" / "0005.json"
    original = list(json.loads(written.read_text()))
    assert list(record)[: len(original)] == original
    assert list(record)[len(original):] == [
        "ceiling_backend", "provenance", "accounted_usd", "rejection", "replay_cursor",
        "ran_with", "model_calls_refused", "provider_failure", "usage_exceeds_request",
        "seccomp_bpf_sha256", "running_totals"]
    assert record["lineage_commit"] == outcome.lineage_commit == git(
        born.worktree, "rev-parse", "HEAD").strip()
    assert record["constraints"]["disclosure"] == "canonical"
    assert record["model_calls"] == fake.calls
    assert record["accounted_usd"] == "0.25" and str(outcome.accounted_usd) == "0.25"
    assert record["provider"] == "echo" and record["model"] == "echo"
    assert record["cpu_usage_nsec"] == 12_000_000 and record["memory_peak_bytes"] == 4_194_304
    assert record["published_files"] == 1
    assert record["published_bytes"] == len(born.organism().encode())
    assert record["result_archive_bytes"] > 0
    assert record["ceiling_backend"] == "fake"
    text = git(born.observations, "show", "HEAD:generations/0001.json")
    assert text.endswith("}\n") and text.startswith('{\n  "schema": ')
    assert formats.parse_observation_subject(
        git(born.observations, "log", "-1", "--format=%s")) == (1, record["outcome"])


def test_replay_cursor_counts_successful_calls_of_earlier_generations(
    born: Lineage, fake: Fake, run_fake: Run, tmp_path: Path
) -> None:
    replay = tmp_path / "replies"
    replay.mkdir()
    model = ModelConfig(provider="replay", name="r", replay_dir=replay)
    fake.calls = [{"http_status": 200}, {"http_status": 402}, {"http_status": 200}]
    run_fake(model=model)
    fake.calls = [{"http_status": 200}]
    run_fake(model=model)
    assert born.observation(2)["replay_cursor"] == 3
    run_fake(model=model)
    # records without the running total (another writer's) are counted one by one
    for number in (2, 3):
        path = born.observations / "generations" / f"{number:04d}.json"
        record = json.loads(path.read_text())
        del record["replay_cursor"]
        path.write_text(json.dumps(record, indent=2) + "\n")
    git(born.observations, "commit", "-qam", "drop the running totals")
    run_fake(model=model)
    cursors = [s["broker"]["replay_cursor"] for s in fake.seen if "broker" in s]
    assert cursors == [0, 2, 3, 4]


def test_each_observation_records_the_lineages_running_totals(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    """Physics release 4: observation N holds the totals through N, by the one rule that
    ``ouro status`` otherwise derives from every record (``kernel.base.totals``)."""
    paid = {"http_status": 200, "accounted_usd": "0.25", "reserved_usd": "0.5"}
    failed = {"http_status": 429, "error": "rate_limited", "accounted_usd": "0",
              "reserved_usd": "0.5"}
    fake.calls = [paid]
    fake.files = {"organism.el": born.organism() + ";; x\n"}
    run_fake()
    fake.calls, fake.exit_status = [paid, paid], 9
    run_fake()
    fake.calls, fake.exit_status, fake.files = [failed], 0, None
    run_fake()
    expected = [
        (1, {"changed": 1, "no-change": 0, "died": 0}, {}, 0, "0.25"),
        (2, {"changed": 1, "no-change": 0, "died": 1}, {"process_exit": 1}, 0, "0.75"),
        (3, {"changed": 1, "no-change": 1, "died": 1}, {"process_exit": 1}, 1, "0.75"),
    ]
    for n, outcomes, kinds, failures, spend in expected:
        assert born.observation(n)["running_totals"] == {
            "schema": "ouro-running-totals/v1", "generations": n, "outcomes": outcomes,
            "death_kinds": kinds, "model_failures": failures, "spend_usd": spend}
    derived = summaries.totals_of(summaries.summarize(born.paths))
    recorded = summaries.totals(born.paths)
    assert recorded == derived and recorded.generations == 3


def test_running_totals_add_up_every_record_when_the_last_lacks_them(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    fake.calls = [{"http_status": 200, "accounted_usd": "0.5"}]
    run_fake()
    run_fake()
    path = born.observations / "generations" / "0002.json"
    record = json.loads(path.read_text())
    del record["running_totals"]  # another writer's record, or a hand's
    path.write_text(json.dumps(record, indent=2) + "\n")
    git(born.observations, "commit", "-qam", "drop the running totals")
    run_fake()
    totals = born.observation(3)["running_totals"]
    assert (totals["generations"], totals["spend_usd"]) == (3, "1.5")
    assert totals["outcomes"] == {"changed": 0, "no-change": 3, "died": 0}


# ---------------------------------------------------------------- external edits


def test_external_edits_are_committed_first_even_ignored_and_untracked(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    (born.worktree / ".gitignore").write_text("secret.txt\n")
    (born.worktree / "secret.txt").write_text("hereditary\n")
    (born.worktree / "dir").mkdir()
    (born.worktree / "dir" / "tool.sh").write_text("#!/bin/sh\n")
    (born.worktree / "dir" / "tool.sh").chmod(0o755)
    (born.worktree / "link").symlink_to("dir/tool.sh")
    outcome = run_fake()
    assert subjects(born.worktree) == ["seed", "external edit", "gen 1: no-change"]
    edit = git(born.worktree, "show", "--format=%an <%ae>", "--name-only", outcome.external_edit
               or "")
    assert edit.splitlines()[0] == "ouroboros <ouroboros@localhost>"
    assert set(edit.split()) >= {".gitignore", "secret.txt", "dir/tool.sh", "link"}
    listing = git(born.worktree, "ls-tree", "-r", "HEAD")
    assert re.search(r"^100755 blob \S+\tdir/tool\.sh$", listing, re.M)
    assert re.search(r"^120000 blob \S+\tlink$", listing, re.M)
    assert git(born.worktree, "status", "--porcelain", "--ignored") == ""


def test_deleted_file_is_an_external_edit(born: Lineage, fake: Fake, run_fake: Run) -> None:
    fake.files = {"organism.el": born.organism(), "a.txt": "a"}
    run_fake()
    fake.files = None
    (born.worktree / "a.txt").unlink()
    outcome = run_fake()
    assert subjects(born.worktree)[-2:] == ["external edit", "gen 2: no-change"]
    assert outcome.external_edit is not None


# ---------------------------------------------------------------- preflight refusals


@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        pytest.param({"commit": "b" * 40}, "instrument-commit-drift", "instrument commit differs",
                     id="other-commit"),
        pytest.param({"fingerprint": "c" * 64}, "fingerprint-drift", "fingerprint differs",
                     id="other-fingerprint"),
    ],
)
def test_other_instrument_is_refused(born: Lineage, run_fake: Run, change: dict[str, str],
                                     reason: str, words: str) -> None:
    before = state(born)
    other = Identity(born.identity.repository, born.identity.ref,
                     change.get("commit", born.identity.commit),
                     change.get("fingerprint", born.identity.fingerprint))
    with pytest.raises(DriftError) as caught:
        run_fake(identity=other)
    assert caught.value.reason == reason
    assert words in str(caught.value) and "start a new lineage" in str(caught.value)
    assert state(born) == before


def test_edited_observation_metadata_is_refused(born: Lineage, run_fake: Run) -> None:
    meta = born.observations / "metadata.json"
    value = json.loads(meta.read_text())
    value["seed_sha256"] = "0" * 64
    meta.write_text(json.dumps(value))
    git(born.observations, "commit", "-qam", "tamper")
    before = state(born)
    with pytest.raises(DriftError) as caught:
        run_fake()
    assert caught.value.reason == "observation-disagrees"
    assert state(born) == before


def test_other_branch_checked_out_is_refused(born: Lineage, run_fake: Run) -> None:
    git(born.worktree, "checkout", "-q", "-b", "elsewhere")
    with pytest.raises(DriftError) as caught:
        run_fake()
    assert caught.value.reason == "branch-mismatch"


def test_metadata_rewritten_by_a_later_commit_is_refused(born: Lineage, run_fake: Run,
                                                         fake: Fake) -> None:
    path = born.worktree / ".ouroboros-lineage.json"
    value = json.loads(path.read_text())
    value["instrument_commit"] = "b" * 40
    path.write_text(json.dumps(value, indent=2) + "\n")
    git(born.worktree, "commit", "-qam", "hand commit: adopt another instrument")
    other = Identity(born.identity.repository, born.identity.ref, "b" * 40,
                     born.identity.fingerprint)
    with pytest.raises(DriftError) as caught:
        run_fake(identity=other)
    assert caught.value.reason == "instrument-commit-drift"  # the root's physics count
    with pytest.raises(DriftError) as caught:
        run_fake()
    assert caught.value.reason == "metadata-edited"
    assert fake.seen == []


def test_edited_metadata_in_worktree_is_refused(born: Lineage, run_fake: Run) -> None:
    path = born.worktree / ".ouroboros-lineage.json"
    path.write_text(path.read_text().replace('"instrument_ref": "main"', '"instrument_ref": "x"'))
    with pytest.raises(DriftError) as caught:
        run_fake()
    assert caught.value.reason == "metadata-edited"
    assert subjects(born.worktree) == ["seed"]


@pytest.mark.parametrize(
    ("model", "key", "words"),
    [
        pytest.param(ModelConfig(provider="unknown", name="x"), None, "unknown model provider",
                     id="unknown-provider"),
        pytest.param(ModelConfig(provider="openai", name="gpt-5.6",
                                 api_key_env="OPENAI_API_KEY"), None, "OPENAI_API_KEY",
                     id="missing-key"),
    ],
)
def test_provider_refused_before_anything(born: Lineage, fake: Fake, run_fake: Run,
                                          model: ModelConfig, key: str | None,
                                          words: str) -> None:
    (born.worktree / "edit.txt").write_text("uncommitted\n")
    before = state(born)
    with pytest.raises(ProviderConfigError, match=words):
        run_fake(model=model, api_key=key)
    assert state(born) == before
    assert fake.seen == [] and fake.scopes == []


def test_scope_failure_is_preflight_not_a_death(born: Lineage, fake: Fake, run_fake: Run) -> None:
    runtime = fake.runtime()

    def refuse(ceilings: Ceilings, name: str) -> Any:
        raise CeilingError("kernel: cannot put the aggregate resource scope in force")

    (born.worktree / "edit.txt").write_text("uncommitted\n")
    before = state(born)
    with pytest.raises(CeilingError, match="aggregate resource scope"):
        run_fake(runtime=dataclasses.replace(runtime, open_scope=refuse))
    assert state(born) == before
    assert subjects(born.worktree) == ["seed"]
    assert fake.nothing_ran()


def test_marker_left_behind_requires_recovery(born: Lineage, run_fake: Run) -> None:
    publish.write_marker(born.paths, {"schema": publish.MARKER_SCHEMA, "generation": 1,
                                      "phase": "running"})
    with pytest.raises(RecoveryError, match="recover"):
        run_fake()


def test_extending_the_original_fixture_is_refused(original_lineage: Path,
                                                   identity: Identity) -> None:
    from reconciler.kernel.base.config import LineagePaths

    root = original_lineage.parent
    paths = LineagePaths(original_lineage, root / "fixture.git", root / "fixture.observations",
                         "lineage-fixture", "observations/lineage-fixture")
    with pytest.raises(DriftError) as caught:
        check_extendable(paths, identity)
    assert caught.value.reason == "instrument-commit-drift"
    assert "start a new lineage" in str(caught.value)


def test_not_a_lineage_is_a_preflight_error(tmp_path: Path, identity: Identity) -> None:
    from reconciler.kernel.base.config import LineagePaths

    paths = LineagePaths(tmp_path / "a", tmp_path / "a.git", tmp_path / "a.obs", "lineage-a",
                         "observations/lineage-a")
    with pytest.raises(PreflightError):
        check_extendable(paths, identity)


# ---------------------------------------------------------------- compare-and-swap


def test_cas_refuses_a_moved_branch_and_writes_nothing(born: Lineage) -> None:
    repo = publish.open_lineage(born.paths)
    head = publish.branch_head(repo, born.paths.branch)
    assert head is not None
    tree = head.tree.id
    first = publish.create_commit(repo, tree, head.id, "external edit")
    second = publish.create_commit(repo, tree, head.id, "gen 1: no-change")
    publish.cas_ref(repo, born.paths.branch, head.id, first, "test")
    with pytest.raises(ConcurrentChangeError, match="moved behind"):
        publish.cas_ref(repo, born.paths.branch, head.id, second, "test")
    assert git(born.worktree, "rev-parse", "HEAD").strip() == str(first)


def test_cas_refuses_while_git_holds_the_ref_lock(
    born: Lineage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publish, "LOCK_PATIENCE_S", 0.3)
    repo = publish.open_lineage(born.paths)
    head = publish.branch_head(repo, born.paths.branch)
    assert head is not None
    lock = Path(repo.path) / "refs" / "heads" / f"{born.paths.branch}.lock"
    lock.write_text("")
    try:
        new = publish.create_commit(repo, head.tree.id, head.id, "x")
        with pytest.raises(ConcurrentChangeError, match="another writer"):
            publish.cas_ref(repo, born.paths.branch, head.id, new, "test")
    finally:
        lock.unlink()
    assert git(born.worktree, "rev-parse", "HEAD").strip() == str(head.id)


def test_cas_waits_for_a_ref_lock_that_is_released(born: Lineage) -> None:
    import threading

    repo = publish.open_lineage(born.paths)
    head = publish.branch_head(repo, born.paths.branch)
    assert head is not None
    lock = Path(repo.path) / "refs" / "heads" / f"{born.paths.branch}.lock"
    lock.write_text("")
    release = threading.Timer(0.4, lock.unlink)
    release.start()
    try:
        new = publish.create_commit(repo, head.tree.id, head.id, "x")
        publish.cas_ref(repo, born.paths.branch, head.id, new, "test")
    finally:
        release.join()
    assert git(born.worktree, "rev-parse", "HEAD").strip() == str(new)


def test_observation_branch_moved_during_generation_is_detected(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    runtime = fake.runtime()
    inner = runtime.run_sandbox

    def sandbox_then_tamper(**kwargs: Any) -> Any:
        result = inner(**kwargs)
        git(born.observations, "commit", "-q", "--allow-empty", "-m", "behind our back")
        return result

    with pytest.raises(ConcurrentChangeError):
        run_fake(runtime=dataclasses.replace(runtime, run_sandbox=sandbox_then_tamper))
    assert subjects(born.worktree) == ["seed"]
    assert not publish.marker_path(born.paths).exists()
    assert git(born.worktree, "status", "--porcelain", "--ignored") == ""


def test_too_many_files_is_a_decoder_death(born: Lineage, fake: Fake, run_fake: Run) -> None:
    fake.files = {"organism.el": born.organism(), "a.txt": "a", "b.txt": "b"}
    outcome = run_fake(ceilings=Ceilings(worktree_files=2))
    assert (outcome.status, outcome.outcome) == ("died", "decoder_rejection")
    assert not (born.worktree / "a.txt").exists()


def test_a_fifo_in_the_worktree_is_refused_before_anything(born: Lineage, fake: Fake,
                                                          run_fake: Run) -> None:
    import os

    os.mkfifo(born.worktree / "pipe")
    before = state(born)
    with pytest.raises(PreflightError, match="pipe"):
        run_fake()
    assert state(born)[:2] == before[:2]
    assert not publish.marker_path(born.paths).exists()
    assert fake.nothing_ran()


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param([("../x", "file")], id="dot-dot"),
        pytest.param([("/etc/x", "file")], id="absolute"),
        pytest.param([("a/.git/config", "file")], id="nested-git"),
        pytest.param([(".GIT. /x", "file")], id="git-variant"),
        pytest.param([("journal.md", "file")], id="kernel-owned-journal"),
        pytest.param([(".ouroboros-lineage.json", "file")], id="kernel-owned-metadata"),
        pytest.param([("a", "symlink"), ("a/b", "file")], id="through-a-symlink"),
        pytest.param([("a", "file"), ("a", "file")], id="duplicate"),
        pytest.param([("a//b", "file")], id="empty-component"),
    ],
)
def test_publication_refuses_what_the_decoder_should_have(
    born: Lineage, entries: list[tuple[str, str]]
) -> None:
    from reconciler.kernel.base.errors import DecoderRejection

    repo = publish.open_lineage(born.paths)
    files = [publish.FileEntry(path, kind, b"x") for path, kind in entries]  # type: ignore[arg-type]
    with pytest.raises(DecoderRejection):
        publish.build_tree(repo, files)


def test_a_generation_racing_another_for_the_marker_runs_nothing(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    from reconciler.kernel.transaction import generation

    real_create = publish.create_marker

    def racing(paths: Any, marker: dict[str, Any]) -> None:
        real_create(paths, {"schema": publish.MARKER_SCHEMA, "generation": 1, "pid": 1})
        real_create(paths, marker)  # ours comes second

    generation.publish.create_marker = racing  # type: ignore[attr-defined]
    try:
        with pytest.raises(ConcurrentChangeError, match="another generation"):
            run_fake()
    finally:
        generation.publish.create_marker = real_create  # type: ignore[attr-defined]
    assert json.loads(publish.marker_path(born.paths).read_text())["pid"] == 1  # theirs, intact
    assert fake.nothing_ran()
    assert subjects(born.worktree) == ["seed"]
