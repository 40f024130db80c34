"""The audit on lineages ouro's own kernel wrote (birth + generations with a fake sandbox):
sound ones pass, and damage done to them afterwards is found."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reconciler.kernel.transaction.generation import GenerationOutcome
from reconciler.state.audit import audit_lineage
from tests.kernel_generation.helpers import Fake, Lineage

Run = Callable[..., GenerationOutcome]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def call(accounted: str) -> dict[str, Any]:
    return {
        "schema": "ouroboros-model-call/v1",
        "http_status": 200,
        "error": None,
        "reserved_usd": accounted,
        "accounted_usd": accounted,
    }


def hostile_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return buffer.getvalue()


def grow(born: Lineage, fake: Fake, run_fake: Run) -> None:
    """Every kind of generation the kernel writes, with external edits between them."""
    seed = born.organism()
    fake.calls = [call("0.02")]
    run_fake()  # gen 1 no-change
    fake.files = {"organism.el": seed + ";; v1\n", "state.el": "(:n 2)\n"}
    run_fake()  # gen 2 changed
    fake.files = {"organism.el": seed + ";; v1\n", "state.el": "(:n 3)\n"}
    run_fake()  # gen 3 changed, organism unchanged
    (born.worktree / "organism.el").write_text("(kill-emacs 3)\n")
    fake.files, fake.exit_status, fake.stderr, fake.calls = None, 3, b"lethal\n", []
    run_fake()  # external edit; gen 4 died
    fake.exit_status, fake.archive = 0, hostile_archive()
    run_fake()  # gen 5 decoder death
    fake.archive, fake.calls = None, [call("0.40"), call("0.60")]
    run_fake()  # gen 6 no-change, at budget


def codes(born: Lineage) -> set[tuple[str, int | None]]:
    result = audit_lineage(born.paths, "test")
    assert result.status != "unknown", result
    return {(f.code, f.generation) for f in result.findings}


def test_a_kernel_written_lineage_passes(born: Lineage, fake: Fake, run_fake: Run) -> None:
    grow(born, fake, run_fake)
    result = audit_lineage(born.paths, "test")
    assert (result.status, result.findings) == ("consistent", ())
    assert (result.generations, result.observations) == (6, 6)


def test_a_freshly_born_lineage_passes(born: Lineage) -> None:
    result = audit_lineage(born.paths, "test")
    assert (result.status, result.generations, result.commits) == ("consistent", 0, 1)


def test_a_kernel_lineage_with_a_deleted_observation(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    grow(born, fake, run_fake)
    git(born.observations, "rm", "-q", "generations/0002.json")
    git(born.observations, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "oops")
    # gen 3's running totals (physics release 4) added up gen 2's record, which is gone
    assert codes(born) == {("observation-missing", 2), ("observation-rewritten", 2),
                           ("running-totals-mismatch", 3)}


def test_a_kernel_lineage_with_an_amended_history(born: Lineage, fake: Fake, run_fake: Run) -> None:
    grow(born, fake, run_fake)
    git(
        born.worktree,
        "-c",
        "user.name=x",
        "-c",
        "user.email=x@x",
        "commit",
        "-q",
        "--amend",
        "--allow-empty",
        "-m",
        "gen 6: no-change",
    )
    assert codes(born) == {("rewritten-history", 6)}


def test_a_kernel_lineage_with_an_overspent_generation(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    grow(born, fake, run_fake)
    fake.calls = [
        call("0.70"),
        call("0.31"),
    ]  # the fake broker does not refuse: the record is at stake
    run_fake()
    assert codes(born) == {("overspend", 7)}


def test_a_kernel_lineage_whose_observation_was_edited(
    born: Lineage, fake: Fake, run_fake: Run
) -> None:
    grow(born, fake, run_fake)
    path = born.observations / "generations" / "0004.json"
    record = json.loads(path.read_text())
    record["outcome"] = "no-change"
    path.write_text(json.dumps(record))
    git(born.observations, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qam", "edit")
    # its running totals (physics release 4) still count the death the record no longer says
    assert codes(born) == {("observation-status-mismatch", 4), ("observation-rewritten", 4),
                           ("running-totals-mismatch", 4)}
