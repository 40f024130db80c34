"""examples/probes on the seed organism and on a broken body, in the real sandbox."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from reconciler.spec.load import load_specs
from reconciler.spec.probes import read_probe_files

from .conftest import run_probe

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

ROOT = Path(__file__).resolve().parents[2]
SEED = (ROOT / "reconciler" / "kernel" / "transaction" / "organism.el").read_bytes()


def commit_of(git_dir: Path, body: bytes) -> str:
    repo = pygit2.init_repository(str(git_dir), bare=True)
    builder = repo.TreeBuilder()
    builder.insert("organism.el", repo.create_blob(body), pygit2.enums.FileMode.BLOB)
    signature = pygit2.Signature("t", "t@invalid")
    return str(repo.create_commit("refs/heads/x", signature, signature, "gen 1: no-change",
                                  builder.write(), []))


def probe(name: str, git_dir: Path, commit: str) -> object:
    return run_probe(git_dir, commit, ["emacs", "-Q", "--batch", "-l", f"/probe/{name}.el"],
                     read_probe_files(ROOT / "examples" / "probes" / name), wall=60, cpu=30,
                     memory=512 << 20)


def test_the_seed_reads_compiles_and_has_its_definitions(tmp_path: Path) -> None:
    commit = commit_of(tmp_path / "x.git", SEED)
    reads = probe("reads", tmp_path / "x.git", commit)
    assert reads.metrics is not None, reads  # type: ignore[attr-defined]
    assert reads.metrics["reads"] is True and reads.metrics["compiles"] is True  # type: ignore[attr-defined]
    definitions = probe("definitions", tmp_path / "x.git", commit)
    functions = SEED.count(b"\n(defun ") + SEED.startswith(b"(defun ")
    variables = SEED.count(b"\n(defvar ")
    assert definitions.metrics == {  # type: ignore[attr-defined]
        "forms": definitions.metrics["forms"],  # type: ignore[attr-defined]
        "definitions": functions + variables, "functions": functions,
        "variables": variables, "bytes": len(SEED)}


def test_a_broken_body_is_measured_as_broken(tmp_path: Path) -> None:
    commit = commit_of(tmp_path / "x.git", b"(defun half (x)\n  (+ x 1)\n")
    reads = probe("reads", tmp_path / "x.git", commit)
    assert reads.metrics == {"reads": False, "forms": 0, "compiles": False,  # type: ignore[attr-defined]
                             "warnings": 0}
    definitions = probe("definitions", tmp_path / "x.git", commit)
    assert definitions.metrics is None  # type: ignore[attr-defined]
    assert definitions.failure.startswith("exit status ")  # type: ignore[attr-defined]
    assert "(end-of-file" in definitions.stderr_tail  # type: ignore[attr-defined]


def test_the_examples_and_the_default_fleet_validate() -> None:
    (probed,) = load_specs([ROOT / "examples" / "probes.yaml"])
    assert [p.name for p in probed.probes] == ["reads", "definitions"]
    fleet = load_specs([ROOT / "specs"])
    assert any(spec.probes for spec in fleet)
