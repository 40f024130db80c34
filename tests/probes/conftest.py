"""Probe test helpers: a lineage-like git dir made with pygit2, one measurement."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pygit2

from reconciler.engine.probes import sandbox
from reconciler.kernel.base.errors import CeilingError
from reconciler.spec.probes import ProbeFiles
from tests.host import require

ORGANISM = b"(message \"hello\")\n(defun one () 1)\n(defun two () 2)\n"


def make_repo(git_dir: Path, generations: int = 1) -> list[str]:
    """A bare repo with ``generations`` commits on lineage-x (organism.el grows)."""
    repo = pygit2.init_repository(str(git_dir), bare=True)
    signature = pygit2.Signature("ouro", "ouro@invalid", 1_700_000_000, 0)
    parents: list[pygit2.Oid] = []
    commits: list[str] = []
    body = ORGANISM
    for number in range(generations):
        builder = repo.TreeBuilder()
        body += b"(defun g%d () %d)\n" % (number, number)
        builder.insert("organism.el", repo.create_blob(body), pygit2.enums.FileMode.BLOB)
        oid = repo.create_commit("refs/heads/lineage-x", signature, signature,
                                 f"gen {number}", builder.write(), parents)
        parents = [oid]
        commits.append(str(oid))
    return commits


def run_probe(git_dir: Path, commit: str, command: list[str],
              files: ProbeFiles | None = None, wall: int = 30, cpu: int = 30,
              memory: int = 256 << 20) -> sandbox.Run:
    require(shutil.which("bwrap") is not None, "needs bubblewrap")
    try:
        return sandbox.measure(git_dir=git_dir, commit=commit, command=command,
                               files=files or ProbeFiles(()),
                               ceilings=sandbox.probe_ceilings(wall, cpu, memory),
                               scope_name=f"test-probe-{uuid.uuid4().hex[:12]}.{os.getpid()}")
    except CeilingError as error:
        require(False, f"needs a backend for the ceilings (root with writable cgroups): {error}")
        raise
