"""A truncated loose object (what a host crash can leave of the last generation's writes):
every command answers, none hangs. libgit2 1.9 loops forever reading one (libgit2#7342);
observe checks what the newest commits added before libgit2 reads anything."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pygit2
import pytest

from tests.apply.helpers import run_ouro, write_spec
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]
TIMEOUT = 60  # seconds: a hang fails the test (subprocess.TimeoutExpired), never the suite


def _truncate(store: Path, oid: pygit2.Oid) -> str:
    hexid = str(oid)
    loose = store / "objects" / hexid[:2] / hexid[2:]
    data = loose.read_bytes()
    loose.chmod(0o644)
    loose.write_bytes(data[: len(data) // 2])
    return hexid


@pytest.mark.parametrize("where", ["journal", "observation", "head-commit"])
@pytest.mark.slow  # 10 s or more on a loaded 2-core host
def test_a_truncated_newest_object_is_a_refusal_everywhere(tmp_path: Path, where: str) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    env = dict(os.environ, OURO_STATE_DIR=str(tmp_path / "state"))
    write_spec(specs, "crashed", 2)
    assert run_ouro("apply", "--yes", str(specs), env=env, timeout=TIMEOUT).returncode == 0
    write_spec(specs, "crashed", 3)
    paths = lineage_paths(tmp_path / "state", "crashed")
    if where == "journal":
        repo = pygit2.Repository(str(paths.git_dir))
        head = repo.revparse_single(f"refs/heads/{paths.branch}")
        assert isinstance(head, pygit2.Commit)
        hexid = _truncate(paths.git_dir, head.tree["journal.md"].id)
    elif where == "head-commit":
        repo = pygit2.Repository(str(paths.git_dir))
        hexid = _truncate(paths.git_dir, repo.references[f"refs/heads/{paths.branch}"].target)
    else:
        repo = pygit2.Repository(str(paths.observations))
        head = repo.revparse_single(f"refs/heads/{paths.observation_branch}")
        assert isinstance(head, pygit2.Commit)
        hexid = _truncate(paths.observations / ".git",
                          (head.tree / "generations" / "0002.json").id)

    plan = run_ouro("plan", "--json", str(specs), env=env, timeout=TIMEOUT)
    assert plan.returncode == 1, plan.stderr
    lineage = json.loads(plan.stdout)["lineages"][0]
    assert lineage["action"] == "refuse" and lineage["reason"] == "damaged", lineage
    assert hexid in plan.stdout and "does not read whole" in plan.stdout
    assert "restore it from a clone or a backup" in plan.stdout
    applied = run_ouro("apply", "--yes", str(specs), env=env, timeout=TIMEOUT)
    assert applied.returncode == 1 and hexid in applied.stdout + applied.stderr
    status = run_ouro("status", str(specs), env=env, timeout=TIMEOUT)
    assert hexid in status.stdout + status.stderr
    verify = run_ouro("verify", str(specs), env=env, timeout=TIMEOUT)
    assert verify.returncode == 1 and "object-unreadable" in verify.stdout
    with_specs = ("--specs", str(specs / "crashed.yaml"))
    log = run_ouro("log", "crashed", *with_specs, env=env, timeout=TIMEOUT)
    assert hexid in log.stdout + log.stderr
    export = run_ouro("export", "crashed", *with_specs, "--format", "jsonl", env=env,
                      timeout=TIMEOUT)
    assert hexid in export.stdout + export.stderr
    show = run_ouro("show", "crashed", "2", *with_specs, env=env, timeout=TIMEOUT)
    assert "Traceback" not in show.stderr
