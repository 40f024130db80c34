"""Hostile organisms and tampered state (issue 13): real Emacs organisms in the real sandbox
(bwrap, cgroup v1, the broker), each ending in a death or a bounded, recorded outcome, after
which one more generation runs and the full-history audit is consistent."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from reconciler.kernel.base.config import KERNEL_OWNED_NAMES, METADATA_FILE, Identity, LineagePaths
from reconciler.kernel.base.errors import DamageError, RecoveryError, StorageError
from reconciler.kernel.sandbox.decoder import MAX_DEPTH, path_budget
from reconciler.kernel.transaction import faults, publish, recovery
from reconciler.kernel.transaction import lineage as kernel_lineage
from reconciler.kernel.transaction.generation import GenerationOutcome, run_generation
from reconciler.state.audit import audit_lineage
from reconciler.state.observe import observe
from tests.host import require
from tests.kernel_broker.organism_harness import elisp_string
from tests.kernel_generation.helpers import (
    ECHO,
    REAL_CEILINGS,
    Lineage,
    git,
    needs_real_host,
    replay_model,
    subjects,
)

pytestmark = [needs_real_host, pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]


def life(born: Lineage, organism: str | None = None) -> GenerationOutcome:
    """One real generation; ``organism`` (Emacs Lisp) is put in the worktree first (it is
    committed as an `external edit` and is the body that lives)."""
    if organism is not None:
        (born.worktree / "organism.el").write_text(organism + "\n(kill-emacs 0)\n")
    return run_generation(paths=born.paths, identity=born.identity, model=ECHO,
                          ceilings=REAL_CEILINGS, api_key=None)


def consistent(born: Lineage) -> None:
    """The audit finds nothing, the worktree is the branch (git agrees), plan sees no damage."""
    audit = audit_lineage(born.paths)
    assert (audit.status, audit.findings) == ("consistent", ()), audit
    assert git(born.worktree, "status", "--porcelain", "--ignored") == ""
    observed = observe(born.paths)
    assert observed.problems == (), observed.problems
    assert observed.dirty_paths == ()


def blob(born: Lineage, path: str) -> bytes:
    return subprocess.run(["git", "show", f"HEAD:{path}"], cwd=born.worktree, check=True,
                          capture_output=True).stdout


# ---------------------------------------------------------------- 2: trees the decoder accepts


@pytest.fixture
def removes_deep_trees(tmp_path: Path) -> Iterator[None]:
    """pytest's own clean-up of old temporary folders recurses (shutil.rmtree) and would
    fail on a 1,000-level tree in every later session on this host: remove it here."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False)


@pytest.mark.usefixtures("removes_deep_trees")
def test_a_thousand_levels_deep_is_a_decoder_rejection_not_a_crash(born: Lineage) -> None:
    deep = "/".join(["a"] * 1000)
    first = life(born, f"""
(let ((dir (concat "/work/" {elisp_string(deep)})))
  (make-directory dir t)
  (write-region "bottom\\n" nil (concat dir "/f.txt")))""")
    assert (first.status, first.outcome) == ("died", "decoder_rejection")
    assert "deeper than 100" in born.observation(1)["rejection"]["message"]
    assert life(born).status == "no-change"  # the seed is back, and lives
    consistent(born)


def test_the_deepest_tree_git_can_check_out_publishes(born: Lineage) -> None:
    deep = "/".join(["a"] * (MAX_DEPTH - 1))
    first = life(born, f"""
(let ((dir (concat "/work/" {elisp_string(deep)})))
  (make-directory dir t)
  (write-region "bottom\\n" nil (concat dir "/f.txt")))""")
    assert first.status == "changed", born.observation(1)
    assert (born.worktree / deep / "f.txt").read_bytes() == b"bottom\n"
    subprocess.run(["git", "status"], cwd=born.worktree, check=True, capture_output=True)
    again = life(born)
    assert (again.generation, again.status) == (2, "no-change")
    consistent(born)


@pytest.mark.parametrize("name", ["GIT~1", ".g\u200cit", ".git::$INDEX_ALLOCATION"])
def test_a_name_git_refuses_is_a_decoder_rejection(born: Lineage, name: str) -> None:
    outcome = life(born, f"""
(make-directory "/work/sub" t)
(write-region "x" nil (concat "/work/sub/" {elisp_string(name)}))""")
    assert (outcome.status, outcome.outcome) == ("died", "decoder_rejection")
    rejection = born.observation(1)["rejection"]
    assert rejection["path"].endswith(f"sub/{name}") and "git refuses" in rejection["message"]
    assert not (born.worktree / "sub").exists()
    assert life(born).status == "no-change"  # the seed is back, and lives
    consistent(born)


def test_a_path_beyond_path_max_below_the_worktree_is_a_decoder_rejection(
    born: Lineage,
) -> None:
    budget = path_budget(born.worktree)
    parts, left = [], budget + 1
    while left > 201:
        parts.append("p" * 200)
        left -= 201
    relative = "/".join([*parts, "f" * left])
    assert len(relative) == budget + 1 and len("/work/" + relative) < 4096
    outcome = life(born, f"""
(let ((file (concat "/work/" {elisp_string(relative)})))
  (make-directory (file-name-directory file) t)
  (write-region "x" nil file))""")
    assert (outcome.status, outcome.outcome) == ("died", "decoder_rejection")
    assert "PATH_MAX" in born.observation(1)["rejection"]["message"]
    assert life(born).status == "no-change"
    consistent(born)


# ---------------------------------------------------------------- 3: attributes change no byte


def test_attributes_filters_and_config_change_no_byte_of_the_worktree(born: Lineage) -> None:
    repo = pygit2.Repository(str(born.paths.git_dir))
    repo.config["core.autocrlf"] = "true"
    repo.config["core.symlinks"] = "false"
    organism = """
(write-region "* text eol=crlf ident\\n" nil "/work/.gitattributes")
(write-region "one\\ntwo $Id$\\n" nil "/work/lines.txt")
(make-symbolic-link "lines.txt" "/work/link" t)"""
    first = life(born, organism)
    assert first.status == "changed"
    for path in ("lines.txt", "journal.md", "organism.el", ".gitattributes"):
        assert (born.worktree / path).read_bytes() == blob(born, path), path
    assert b"\r" not in (born.worktree / "journal.md").read_bytes()
    assert os.readlink(born.worktree / "link") == "lines.txt"
    second = life(born)
    assert second.status == "no-change" and second.external_edit is None
    assert subjects(born.worktree)[-2:] == ["gen 1: changed (organism unchanged; 3 other "
                                            "paths)", "gen 2: no-change"]
    consistent(born)


# ---------------------------------------------------------------- 4: /dev is not a store


def test_dev_and_dev_shm_are_read_only_but_the_devices_work(born: Lineage) -> None:
    outcome = life(born, """
(let (wrote)
  (dolist (file '("/dev/shm/fill" "/dev/fill" "/dev/pts/fill"))
    (condition-case nil (progn (write-region "x" nil file) (push file wrote)) (error nil)))
  (write-region "still a device" nil "/dev/null")
  (message "wrote: %S" wrote)
  (when wrote (kill-emacs 3)))""")
    assert outcome.status != "died", born.observation(1)["stderr_tail"]
    assert "wrote: nil" in born.observation(1)["stderr_tail"]
    assert life(born).status == "no-change"
    consistent(born)


# ---------------------------------------------------------------- 7: kernel-owned names


def test_kernel_owned_names_written_by_the_organism_are_dropped(born: Lineage) -> None:
    metadata = (born.worktree / METADATA_FILE).read_bytes()
    outcome = life(born, """
(write-region "forged journal\\n" nil "/work/journal.md")
(write-region "{}" nil "/work/.ouroboros-lineage.json")
(write-region "kept\\n" nil "/work/kept.txt")""")
    assert outcome.status == "changed"
    assert (born.worktree / "kept.txt").read_text() == "kept\n"
    assert (born.worktree / METADATA_FILE).read_bytes() == metadata
    journal = born.journal()
    assert "forged" not in journal and "## gen 1 — changed — organism unchanged; 1 other" in journal
    assert set(KERNEL_OWNED_NAMES) - {".git"} <= set(os.listdir(born.worktree))
    assert life(born).status == "no-change"
    consistent(born)


# ---------------------------------------------------------------- 5: state tampering


def test_a_worktree_replaced_by_a_symlink_is_refused_not_followed(
    born: Lineage, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    shutil.copytree(born.worktree, victim, symlinks=True)
    (victim / "secret.txt").write_text("the victim's\n")
    real = tmp_path / "real-worktree"
    born.worktree.rename(real)
    born.worktree.symlink_to(victim)
    assert [p.code for p in observe(born.paths).problems] == ["damaged"]
    with pytest.raises(DamageError, match="is not a directory"):
        life(born)
    assert sorted(os.listdir(victim)) == sorted([*os.listdir(real), "secret.txt"])
    assert subjects(real) == ["seed"] and "secret.txt" not in git(real, "ls-files")
    born.worktree.unlink()
    real.rename(born.worktree)
    assert life(born).generation == 1
    consistent(born)


def _loose(repo_dir: Path, oid: pygit2.Oid) -> Path:
    return repo_dir / "objects" / str(oid)[:2] / str(oid)[2:]


def test_a_corrupt_object_is_found_by_verify_and_refused_by_apply(born: Lineage) -> None:
    assert life(born).status == "no-change"
    repo = pygit2.Repository(str(born.paths.git_dir))
    head = repo.revparse_single("refs/heads/lineage-test")
    assert isinstance(head, pygit2.Commit)
    target = _loose(born.paths.git_dir, head.tree["organism.el"].id)
    good = target.read_bytes()
    target.chmod(0o644)
    inner = zlib.decompress(good)
    target.write_bytes(zlib.compress(inner[:-2] + b"X\n"))  # same size, other bytes
    audit = audit_lineage(born.paths)
    assert audit.status == "findings"
    assert [f.code for f in audit.findings] == ["object-unreadable"]
    with pytest.raises(DamageError, match="missing or corrupt") as caught:
        life(born)
    assert caught.value.reason == "repository-damaged"
    assert "hash mismatch" in str(caught.value)
    assert not publish.read_marker(born.paths)[0]  # the attempt was settled
    target.write_bytes(good)  # restored from a backup
    assert life(born).generation == 2
    consistent(born)


def test_a_stale_branch_lock_is_found_before_the_sandbox_runs(born: Lineage) -> None:
    lock = born.paths.git_dir / "refs" / "heads" / "lineage-test.lock"
    lock.write_text("0" * 40 + "\n")
    assert [p.code for p in observe(born.paths).problems] == ["damaged"]
    with pytest.raises(DamageError, match=r"lineage-test\.lock"):
        life(born, '(write-region "ran" nil "/work/ran.txt")')
    assert subjects(born.worktree) == ["seed"]
    assert git(born.observations, "log", "--format=%s").splitlines() == [
        "observe: initialize lineage-test"]
    lock.unlink()
    assert life(born).status == "changed"  # the external edit's organism lives now
    assert (born.worktree / "ran.txt").read_text() == "ran"
    consistent(born)


def _stale_marker(born: Lineage, pid: int, start: str | None) -> None:
    lineage = pygit2.Repository(str(born.paths.git_dir))
    observations = pygit2.Repository(str(born.paths.observations))
    marker = {
        "schema": publish.MARKER_SCHEMA, "generation": 1,
        "lineage_head": str(lineage.head.target),
        "observation_head": str(observations.head.target), "phase": "running",
        "pid": pid, "pid_start": start, "started_at": "2026-01-01T00:00:00+00:00",
    }
    publish.marker_path(born.paths).write_text(json.dumps(marker))


def test_a_marker_naming_a_live_unrelated_pid_is_recovered_by_plan_and_apply_alike(
    born: Lineage,
) -> None:
    unrelated = subprocess.Popen(["sleep", "60"])
    try:
        for start in ("1", None):  # another start time, or none recorded: not its writer
            _stale_marker(born, unrelated.pid, start)
            observed = observe(born.paths)
            assert observed.problems == ()
            assert observed.interrupted is not None and observed.interrupted.kind == "discard"
            recovery.recover(born.paths)
            assert not publish.read_marker(born.paths)[0]
        # a marker naming a live process at that process's own start time: it is running
        with open(f"/proc/{unrelated.pid}/stat") as handle:
            start_time = handle.read().rsplit(")", 1)[1].split()[19]
        _stale_marker(born, unrelated.pid, start_time)
        assert [p.code for p in observe(born.paths).problems] == ["generation-running"]
        with pytest.raises(RecoveryError, match="still running"):
            recovery.recover(born.paths)
    finally:
        unrelated.kill()
        unrelated.wait()
    recovery.recover(born.paths)
    assert life(born).generation == 1
    consistent(born)


# ---------------------------------------------------------------- 6: a full disk says so


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB tmpfs of our own (root only), unmounted afterwards."""
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "needs root to mount")
    place = tmp_path / "small"
    place.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=0755", "ouro-test", str(place)],
                   check=True)
    try:
        yield place
    finally:
        subprocess.run(["umount", "-l", str(place)], check=False)


def test_no_space_left_on_device_is_said_with_its_place(small_disk: Path,
                                                         identity: Identity) -> None:
    paths = LineagePaths(small_disk / "lin", small_disk / "lin.git",
                         small_disk / "lin.observations", "lineage-test",
                         "observations/lineage-test")
    kernel_lineage.init_lineage(paths, identity)
    born = Lineage(paths, identity)
    big = """
(call-process "sh" nil nil nil "-c" "head -c 9000000 /dev/urandom > /work/big.bin")"""
    with pytest.raises(StorageError) as caught:
        life(born, big)
    message = str(caught.value)
    assert "no space left on device" in message and str(small_disk) in message, message
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    if publish.read_marker(paths)[0]:
        recovery.recover(paths)
    outcome = life(born)
    assert outcome.status == "changed" and (born.worktree / "big.bin").stat().st_size == 9000000
    consistent(born)


@pytest.mark.parametrize("text", ["failed to write out file: No space left on device",
                                  "failed to make directory: Disk quota exceeded"])
def test_libgit2s_full_disk_without_an_errno_is_said_as_one(tmp_path: Path, text: str) -> None:
    """libgit2 raises an OSError with no errno and the cause in its text."""
    paths = LineagePaths(tmp_path / "lin", tmp_path / "lin.git", tmp_path / "lin.observations",
                         "lineage-test", "observations/lineage-test")
    said = faults.translate(OSError(text), paths)
    assert isinstance(said, StorageError)
    assert str(said).startswith("kernel: no space left on device"), said
    assert "free space there" in str(said)


# ---------------------------------------------------------------- 1: the model socket firehose


FIREHOSE = """
(write-region (make-string 65536 ?p) nil "/tmp/prompt")
(with-temp-buffer
  (call-process "sh" nil t nil "-c"
    "for i in $(seq 1 %d); do curl -s --unix-socket /kernel/model.sock \\
       -H 'X-Ouroboros-Max-Output-Tokens: 10' --data-binary @/tmp/prompt \\
       -o /dev/null -w '%%{http_code}\\\\n' http://kernel/generate; done")
  (message "%%s" (buffer-string)))"""


@pytest.mark.parametrize(("ceilings", "served"), [
    ({"model_requests": 3}, 3),
    ({"model_audit_bytes": 150_000}, 3),  # 65,536-byte prompts: the third crosses the line
], ids=["requests", "audited-bytes"])
def test_a_model_socket_firehose_is_answered_429_past_the_ceilings(
    born: Lineage, tmp_path: Path, ceilings: dict[str, int], served: int
) -> None:
    require(shutil.which("curl") is not None, "needs curl under /usr")
    limits = dataclasses.replace(REAL_CEILINGS, **ceilings)
    model = replay_model(tmp_path / "replies", ["(reply)"] * 10)
    (born.worktree / "organism.el").write_text(FIREHOSE % 12 + "\n(kill-emacs 0)\n")
    outcome = run_generation(paths=born.paths, identity=born.identity, model=model,
                             ceilings=limits, api_key=None)
    assert outcome.status != "died", born.observation(1)["stderr_tail"]
    record = born.observation(1)
    statuses = [line for line in record["stderr_tail"].split("\n") if line.isdigit()]
    assert statuses == ["200"] * served + ["429"] * (12 - served)
    assert len(record["model_calls"]) == served and record["model_calls_refused"] == 12 - served
    assert record["replay_cursor"] == served  # the provider was never asked past the ceiling
    assert all(call["prompt"] == "p" * 65536 for call in record["model_calls"])
    assert record["constraints"]["model"]["max_requests"] == limits.model_requests
    observation = born.observations / "generations" / "0001.json"
    assert observation.stat().st_size < served * 65536 * 1.1 + 50_000  # each prompt once
    again = run_generation(paths=born.paths, identity=born.identity, model=model,
                           ceilings=limits, api_key=None)
    assert again.generation == 2
    consistent(born)
