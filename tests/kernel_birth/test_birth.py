"""Lineage birth: three new places, the seed commit, the observation repo; refusals write nothing.

The result is checked with the real git CLI (what users and the original
instrument's tools see), and against the original instrument's fixture lineage.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pygit2
import pytest

from reconciler.kernel.base.config import Identity, LineagePaths
from reconciler.kernel.base.errors import BirthError
from reconciler.kernel.transaction import lineage
from reconciler.kernel.transaction.lineage import ORGANISM, SIGNATURE, init_lineage

IDENTITY = Identity("https://example.invalid/ouro.git", "main", "5" * 40, "a" * 64)


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def places(root: Path, name: str = "demo") -> LineagePaths:
    return LineagePaths(root / name, root / f"{name}.git", root / f"{name}.observations",
                        f"lineage-{name}", f"observations/lineage-{name}")


def snapshot(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_birth_makes_a_normal_lineage_that_git_itself_reads(tmp_path: Path) -> None:
    paths = places(tmp_path / "lineages")
    init_lineage(paths, IDENTITY)

    worktree = paths.worktree
    assert (worktree / ".git").read_text() == f"gitdir: {paths.git_dir}\n"
    assert git("config", "core.worktree", cwd=worktree).strip() == str(worktree)
    assert git("status", "--porcelain", "--ignored", cwd=worktree) == ""
    assert git("branch", "--show-current", cwd=worktree).strip() == "lineage-demo"
    assert git("branch", "--list", cwd=worktree).split() == ["*", "lineage-demo"]
    assert git("log", "--format=%an <%ae>|%cn <%ce>|%s|%P", cwd=worktree).splitlines() == [
        "ouroboros <ouroboros@localhost>|ouroboros <ouroboros@localhost>|seed|"]
    assert git("ls-tree", "-r", "--name-only", "HEAD", cwd=worktree).split() == [
        ".ouroboros-lineage.json", "journal.md", "organism.el"]
    assert git("cat-file", "-p", "HEAD", cwd=worktree).endswith("\nseed\n")
    git("fsck", "--strict", cwd=worktree)
    assert (worktree / "organism.el").read_bytes() == ORGANISM.read_bytes()
    assert (worktree / "journal.md").read_bytes() == b""
    assert not (worktree / ".git").is_dir() and (paths.git_dir / "HEAD").is_file()

    metadata = json.loads(git("show", "HEAD:.ouroboros-lineage.json", cwd=worktree))
    assert metadata == {
        "schema": "ouroboros-lineage/v2",
        "instrument_repository": IDENTITY.repository,
        "instrument_ref": IDENTITY.ref,
        "instrument_commit": IDENTITY.commit,
        "instrument_fingerprint": IDENTITY.fingerprint,
        "seed_sha256": hashlib.sha256(ORGANISM.read_bytes()).hexdigest(),
        # ouro's added key: the entry point of the kernel that must extend it
        "ouro_kernel_entry": "ouro-kernel-request/v1",
    }

    observations = paths.observations
    assert (observations / ".git").is_dir()
    assert git("branch", "--show-current", cwd=observations).strip() == \
        "observations/lineage-demo"
    assert git("status", "--porcelain", cwd=observations) == ""
    assert git("log", "--format=%an <%ae>|%s", cwd=observations).splitlines() == [
        "ouroboros <ouroboros@localhost>|observe: initialize lineage-demo"]
    assert json.loads((observations / "metadata.json").read_text()) == {
        "schema": "ouroboros-observations/v1",
        "lineage_branch": "lineage-demo",
        "observation_branch": "observations/lineage-demo",
        **{key: value for key, value in metadata.items() if key != "schema"},
    }


def test_files_are_formatted_like_the_original_instruments(
        tmp_path: Path, original_lineage: Path) -> None:
    paths = places(tmp_path / "new")
    init_lineage(paths, IDENTITY)
    pairs = [(paths.worktree / ".ouroboros-lineage.json",
              original_lineage / ".ouroboros-lineage.json"),
             (paths.observations / "metadata.json",
              original_lineage.parent / "fixture.observations" / "metadata.json")]
    for ours, theirs in pairs:
        mine, original = ours.read_text(), theirs.read_text()
        # the original's keys in its order, then ouro's one addition (only keys are added)
        assert list(json.loads(mine)) == [*json.loads(original), "ouro_kernel_entry"]
        assert mine.endswith("}\n") and original.endswith("}\n")
        assert mine.splitlines()[1].startswith('  "schema": ')
    assert (original_lineage / ".git").read_text().startswith("gitdir: ")


def test_signature_is_the_original_instruments() -> None:
    assert (SIGNATURE.name, SIGNATURE.email) == ("ouroboros", "ouroboros@localhost")


def test_seed_is_valid_emacs_lisp() -> None:
    result = subprocess.run(
        ["emacs", "-Q", "--batch", "--eval",
         f'(with-temp-buffer (insert-file-contents "{ORGANISM}") (emacs-lisp-mode)'
         ' (check-parens) (goto-char (point-min))'
         ' (condition-case nil (while t (read (current-buffer))) (end-of-file nil)))'],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


EXISTING = [
    pytest.param("worktree", "dir", id="worktree-exists"),
    pytest.param("git_dir", "dir", id="git-dir-exists"),
    pytest.param("observations", "dir", id="observations-exist"),
    pytest.param("worktree", "file", id="worktree-is-a-file"),
    pytest.param("observations", "dangling-symlink", id="observations-dangling-symlink"),
]


@pytest.mark.parametrize(("place", "kind"), EXISTING)
def test_refuses_any_existing_place_and_writes_nothing(
        tmp_path: Path, place: str, kind: str) -> None:
    paths = places(tmp_path)
    target: Path = getattr(paths, place)
    if kind == "dir":
        target.mkdir()
    elif kind == "file":
        target.write_text("mine")
    else:
        target.symlink_to(tmp_path / "nowhere")
    before = snapshot(tmp_path)
    with pytest.raises(BirthError, match="already exists"):
        init_lineage(paths, IDENTITY)
    assert snapshot(tmp_path) == before


BAD_BRANCHES = [
    pytest.param("lineage-a..b", "observations/ok", id="double-dot"),
    pytest.param("lineage-a b", "observations/ok", id="space"),
    pytest.param("lineage-x.lock", "observations/ok", id="dot-lock"),
    pytest.param("lineage-x~1", "observations/ok", id="tilde"),
    pytest.param("lineage-x/", "observations/ok", id="trailing-slash"),
    pytest.param("-lineage", "observations/ok", id="leading-dash"),
    pytest.param("HEAD", "observations/ok", id="head"),
    pytest.param("", "observations/ok", id="empty"),
    pytest.param("lineage-ok", "observations/lineage-ok:x", id="observation-colon"),
    pytest.param("lineage-ok", "observations//x", id="observation-double-slash"),
    pytest.param("lineage-ok", "observations/.x", id="observation-dot-component"),
    pytest.param("lineage-ok", "obs@{1}", id="observation-at-brace"),
]


@pytest.mark.parametrize(("branch", "observation_branch"), BAD_BRANCHES)
def test_refuses_invalid_branch_names(
        tmp_path: Path, branch: str, observation_branch: str) -> None:
    paths = LineagePaths(tmp_path / "l", tmp_path / "l.git", tmp_path / "l.observations",
                         branch, observation_branch)
    with pytest.raises(BirthError, match="not a valid git branch name"):
        init_lineage(paths, IDENTITY)
    assert snapshot(tmp_path) == []


@pytest.mark.parametrize("branch", ["lineage-gpt-03", "lineage-a/b", "lineage-x.y"])
def test_git_agrees_the_accepted_branch_names_are_valid(tmp_path: Path, branch: str) -> None:
    subprocess.run(["git", "check-ref-format", "--branch", branch], check=True,
                   capture_output=True)
    paths = LineagePaths(tmp_path / "l", tmp_path / "l.git", tmp_path / "l.o", branch,
                         f"observations/{branch}")
    init_lineage(paths, IDENTITY)
    assert git("branch", "--show-current", cwd=paths.worktree).strip() == branch


BAD_IDENTITIES = [
    pytest.param(Identity("r", "m", "abc123", "a" * 64), "not a full hex", id="short-commit"),
    pytest.param(Identity("r", "m", "A" * 40, "a" * 64), "not a full hex", id="upper-commit"),
    pytest.param(Identity("r", "m", "5" * 39, "a" * 64), "not a full hex", id="39-hex"),
    pytest.param(Identity("r", "m", "g" * 40, "a" * 64), "not a full hex", id="not-hex"),
    pytest.param(Identity("r", "m", "", "a" * 64), "not a full hex", id="empty-commit"),
    pytest.param(Identity("r", "m", "5" * 40, "a" * 40), "fingerprint", id="short-fingerprint"),
]


@pytest.mark.parametrize(("identity", "message"), BAD_IDENTITIES)
def test_refuses_an_unknown_instrument(tmp_path: Path, identity: Identity, message: str) -> None:
    with pytest.raises(BirthError, match=message):
        init_lineage(places(tmp_path), identity)
    assert snapshot(tmp_path) == []


def test_sha256_object_ids_are_full_ids(tmp_path: Path) -> None:
    init_lineage(places(tmp_path), Identity("r", "m", "b" * 64, "a" * 64))
    metadata = json.loads((tmp_path / "demo" / ".ouroboros-lineage.json").read_text())
    assert metadata["instrument_commit"] == "b" * 64


def test_refuses_nested_places(tmp_path: Path) -> None:
    paths = LineagePaths(tmp_path / "l", tmp_path / "l" / "inner.git", tmp_path / "l.o",
                         "lineage-l", "observations/lineage-l")
    with pytest.raises(BirthError, match="would contain"):
        init_lineage(paths, IDENTITY)
    assert snapshot(tmp_path) == []


@pytest.mark.parametrize("failing_call", [1, 2], ids=["lineage-commit", "observation-commit"])
def test_a_failure_midway_removes_everything_it_created(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: int) -> None:
    real = lineage._commit_files
    calls = []

    def flaky(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) == failing_call:
            raise OSError(28, "No space left on device")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(lineage, "_commit_files", flaky)
    (tmp_path / "keep").write_text("not ours")
    paths = places(tmp_path / "deep" / "er")
    with pytest.raises(BirthError, match="No space left") as caught:
        init_lineage(paths, IDENTITY)
    assert isinstance(caught.value.__cause__, OSError)
    assert snapshot(tmp_path) == ["keep"]


def test_unwritable_parent_is_a_birth_error_not_a_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(BirthError):
        init_lineage(places(blocker), IDENTITY)
    assert snapshot(tmp_path) == ["file"]


def test_relative_paths_are_recorded_absolute(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    init_lineage(places(Path("rel")), IDENTITY)
    assert (tmp_path / "rel/demo/.git").read_text() == f"gitdir: {tmp_path}/rel/demo.git\n"
    assert git("status", "--porcelain", cwd=tmp_path / "rel/demo") == ""
    assert os.path.isabs(git("config", "core.worktree", cwd=tmp_path / "rel/demo").strip())


def test_metadata_reads_back_through_pygit2(tmp_path: Path, original_lineage: Path,
                                            sample_lineage: Path) -> None:
    paths = places(tmp_path / "mine")
    init_lineage(paths, IDENTITY)
    mine = lineage.read_lineage_metadata(pygit2.Repository(str(paths.git_dir)))
    assert mine is not None and mine["instrument_commit"] == IDENTITY.commit
    theirs = lineage.read_lineage_metadata(pygit2.Repository(str(original_lineage)))
    assert theirs is not None and theirs["schema"] == "ouroboros-lineage/v2"
    assert lineage.read_lineage_metadata(pygit2.Repository(str(sample_lineage))) is None
    assert lineage.read_lineage_metadata(pygit2.Repository(str(paths.git_dir)), "f" * 40) is None


def test_public_names_are_chosen() -> None:
    assert sorted(lineage.__all__) == [
        "OBSERVATION_METADATA_FILE", "ORGANISM", "SIGNATURE", "init_lineage", "lineage_metadata",
        "observation_metadata", "read_json_blob", "read_lineage_metadata", "seed_sha256"]
    assert lineage.seed_sha256() == hashlib.sha256(ORGANISM.read_bytes()).hexdigest()


def test_concurrent_births_of_one_lineage_one_wins_and_nothing_of_the_winner_is_removed(
        tmp_path: Path) -> None:
    paths = places(tmp_path / "a" / "b")
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(init_lineage, paths, IDENTITY) for _ in range(4)]
    errors = [f.exception() for f in futures]
    assert sum(e is None for e in errors) == 1
    assert all(isinstance(e, BirthError) for e in errors if e is not None)
    assert git("status", "--porcelain", cwd=paths.worktree) == ""
    assert git("log", "--format=%s", cwd=paths.observations).strip() == \
        "observe: initialize lineage-demo"
