"""The original instrument still validates a lineage that has probe records.

A real lineage grown by ``ouro apply`` with two real probes (one measuring, one
failing) has its records on ``probes/<lineage branch>`` of the observation
repository. The original's reader (``tests.kernel_formats.original_reader``,
transcribed from scottviteri/ouroboros at 922cd18; nothing is fetched) reads the
lineage through git as it does and finds it valid; its kernel's check of the
observation repository finds it on the observation branch with its metadata; and
that branch holds the observations only.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from reconciler.state import probes as stored
from tests.apply.helpers import run_ouro, write_spec
from tests.kernel_formats import original_reader
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

PROBES = """\
  probes:
    - name: size
      run: [/bin/sh, -c, 'printf "{\\"bytes\\": %d}" "$(wc -c < organism.el)"']
      ceilings: {wall: 20s, cpu: 5s, memory: 256MiB}
    - name: broken
      run: [/bin/sh, -c, 'echo no metrics; exit 3']
      ceilings: {wall: 20s, cpu: 5s, memory: 256MiB}
"""


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def test_the_originals_reader_validates_a_lineage_with_probe_records(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    spec = write_spec(specs, "measured", 3)
    spec.write_text(spec.read_text() + PROBES)
    applied = run_ouro("apply", "--yes", str(spec), env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    paths = lineage_paths(tmp_path / "state", "measured")
    found = stored.records(paths)
    assert sorted((r.record["probe"], r.generation) for r in found) == [  # 0: the seed
        (probe, n) for probe in ("broken", "size") for n in range(4)]
    assert {r.record["failure"] for r in found if r.record["probe"] == "broken"} == {
        "exit status 3"}

    verdict = original_reader.verify_lineage(paths.worktree, paths.git_dir)
    assert verdict == {"valid": True, "commit_count": verdict["commit_count"],
                       "generation_count": 3, "errors": []}, verdict
    assert original_reader.check_observations(paths.observations, paths.branch,
                                              paths.observation_branch) == []
    # the observation branch the original reads holds observations, not probe records
    subjects = _git("-C", str(paths.observations), "log", "--format=%s",
                    paths.observation_branch).splitlines()
    assert not any(subject.startswith("probe ") for subject in subjects), subjects
    files = _git("-C", str(paths.observations), "ls-tree", "-r", "--name-only",
                 paths.observation_branch).split()
    assert [f for f in files if f.startswith("generations/")] == [
        f"generations/{n:04d}.json" for n in (1, 2, 3)]
    assert _git("-C", str(paths.observations), "status", "--porcelain") == ""
    records = _git("-C", str(paths.observations), "log", "--format=%s",
                   f"probes/{paths.branch}").splitlines()
    assert len(records) == 8 and all(line.startswith("probe ") for line in records)  # + seed
    # ouro's own verify agrees, probe records included
    verified = run_ouro("verify", "--json", "--full", str(spec), env=env)
    assert verified.returncode == 0, verified.stdout
    assert json.loads(verified.stdout)["lineages"][0]["findings"] == []
