"""Physics release 5's allow list is wide enough: the default fleet (specs/: the seed
organism with the scribe's replies, its probe, an echo lineage) and the examples' probes
run under the same table with every refusal turned into a kill (SIGSYS), and nothing
dies. The one refusal glibc meets and falls back from, clone3, stays ENOSYS.

A tracing run without strace: ``ouro apply`` in a child whose kernel builds this strict
filter from ``seccomp_filter.RULES`` instead of the real one (the in-process kernel and
the probe sandbox both take it from ``seccomp_bpf.bpf``). A control lineage whose probe
runs ``unshare`` shows the strict filter is in force: it is killed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apply.helpers import REPO_ROOT
from tests.host import require
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

STRICT_OURO = """
import errno, sys
import pyseccomp
from reconciler.kernel.base import seccomp_filter
from reconciler.kernel.sandbox import seccomp_bpf

def strict() -> bytes:
    kill = pyseccomp.KILL_PROCESS
    built = pyseccomp.SyscallFilter(kill)
    built.set_attr(pyseccomp.Attr.ACT_BADARCH, kill)
    ops = {"MASKED_EQ": pyseccomp.MASKED_EQ, "NE": pyseccomp.NE, "EQ": pyseccomp.EQ}
    for rule in seccomp_filter.RULES:  # a refusal is the default: a kill
        if rule.action == "ALLOW":
            args = [pyseccomp.Arg(i, ops[op], a, b) for i, op, a, b in rule.args]
            built.add_rule_exactly(pyseccomp.ALLOW, rule.syscall, *args)
    built.add_rule_exactly(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    with open(sys.argv.pop(1), "w+b") as sink:
        built.export_bpf(sink)
        sink.seek(0)
        return sink.read()

program = strict()
seccomp_bpf.bpf = lambda: program
from reconciler.cli import main
sys.argv[0] = "ouro"
main()
"""

CONTROL = """\
apiVersion: ouro/v1
kind: Lineage
metadata:
  name: control
spec:
  generations: 1
  model:
    provider: echo
  probes:
    - name: unshares
      run: [unshare, --user, /bin/true]
      ceilings: {wall: 30s, cpu: 10s, memory: 256MiB}
"""


def test_the_fleet_and_the_examples_probes_meet_no_refusal(tmp_path: Path) -> None:
    require(shutil.which("bwrap") is not None, "needs bubblewrap")
    specs = tmp_path / "specs"
    shutil.copytree(REPO_ROOT / "specs", specs)
    shutil.copytree(REPO_ROOT / "examples" / "probes", specs / "probes", dirs_exist_ok=True)
    shutil.copy(REPO_ROOT / "examples" / "probes.yaml", specs / "probes-example.yaml")
    (specs / "control.yaml").write_text(CONTROL)
    state = tmp_path / "state"
    env = dict(os.environ, OURO_STATE_DIR=str(state))
    done = subprocess.run(
        [sys.executable, "-c", STRICT_OURO, str(tmp_path / "strict.bpf"), "apply", "--yes",
         "--json", "--parallel", "2", str(specs)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    lineages = {row["name"]: row for row in report["lineages"]}
    assert set(lineages) == {"scribe", "quiet", "probed", "control"}, done.stderr
    for name in ("scribe", "quiet", "probed"):
        paths = lineage_paths(state, name)
        row = lineages[name]
        assert row["generations_run"] >= 1 and row["probe_failures"] == 0, (name, row)
        for number in range(1, row["generations_run"] + 1):
            record = _observation(paths.observations, number)
            # a death is the organism's own (a reply of the scribe's dies by a Lisp
            # error, under any filter), never a kill: no signal, no "Bad system call"
            assert record["outcome"] != "signal", (name, number, record["stderr_tail"])
            assert record["exit_status"] in (0, 255), (name, number, record["exit_status"])
            assert "Bad system call" not in str(record["stderr_tail"])
    assert lineages["scribe"]["measured"] >= 5 and lineages["probed"]["measured"] >= 6
    assert any(str(_observation(lineage_paths(state, "scribe").observations, n)["outcome"])
               .startswith("changed") for n in range(1, 6))  # the scribe's replies were installed
    # the control: unshare(2) under the strict filter is a kill, so the probe fails
    # (its seed, generation 0, and its generation 1: both measured, both killed)
    assert lineages["control"]["probe_failures"] == 2, lineages["control"]
    assert lineages["control"]["generations_run"] == 1


def _observation(observations: Path, number: int) -> dict[str, object]:
    import pygit2

    repo = pygit2.Repository(str(observations))
    blob = repo.head.peel(pygit2.Commit).tree[f"generations/{number:04d}.json"]
    value: dict[str, object] = json.loads(blob.data)
    return value
