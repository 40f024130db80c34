"""A small grown table for the table's tests: real lineages written in
docs/lineage-contract.md's formats (tests.observe.builder, pygit2), a LineageSet of two
replicas, a fork of a member and a fork of that fork, probe records written by ouro's
writer (a string metric holding U+2028 and U+0085, a failure, a generation not
measured); and the table they make, each lineage's row 0 (its seed) first, written
by hand from those inputs (``grow``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.engine.probes.records import write_record
from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.load import load_specs
from reconciler.spec.probes import ProbeFiles
from reconciler.state.forks import FORK_KEY
from tests.observe.builder import LineageBuilder

__all__ = ["NOTE", "ForkBuilder", "fork_record", "grow"]

SPECS = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {name: evo}
spec:
  replicas: 2
  matrix:
    ceilings.wall: [60s]
  template: {generations: 3, model: {provider: echo}}
---
apiVersion: ouro/v1
kind: Lineage
metadata: {name: kid}
spec:
  generations: 1
  model: {provider: echo}
  from: {lineage: MEMBER, generation: 2}
---
apiVersion: ouro/v1
kind: Lineage
metadata: {name: grandkid}
spec:
  generations: 1
  model: {provider: echo}
  from: {lineage: kid, generation: 1}
"""
CALL = {"http_status": 200, "usage": {"input_tokens": 10, "output_tokens": 4},
        "accounted_usd": "0.01", "reserved_usd": "0.05"}
NOTE = "line\u2028separated\u0085next"  # a probe's string metric: allowed, never re-split
DIGEST = "d" * 64
PROBE = {"name": "shape", "digest": DIGEST, "body": {"run": ["true"], "files": None}}


class ForkBuilder(LineageBuilder):
    """A lineage whose root metadata carries a fork's ancestry record."""

    def __init__(self, root: Path, name: str, fork: dict[str, Any]) -> None:
        self.fork = fork
        super().__init__(root, name)

    def lineage_metadata(self) -> dict[str, Any]:
        return {**super().lineage_metadata(), FORK_KEY: self.fork}


def fork_record(parent: str, root: str, generation: int, commit: str) -> dict[str, Any]:
    return {"schema": "ouro-fork/v1", "parent": parent, "parent_root": root,
            "parent_branch": f"lineage-{parent}", "generation": generation,
            "commit": commit, "parent_kernel": {"commit": "5" * 40, "fingerprint": "f" * 64},
            "kernel": "running", "same_physics": True}


def _probe(paths: LineagePaths, generation: int, commit: str,
           metrics: dict[str, Any] | None, failure: str | None) -> None:
    write_record(paths, PROBE, ProbeFiles(()), generation, {
        "probe": "shape", "digest": DIGEST, "generation": generation, "commit": commit,
        "metrics": metrics, "failure": failure})


# What each generation the builder writes is, by construction (tests.observe.builder):
# the seed organism is 48 bytes (";;; organism.el --- test seed\n" and
# "(message \"alive\")\n"); a changed generation appends ";; gen N\n" (9 bytes) to the
# seed's, one line added in one path; a no-change keeps the organism before it; a death
# keeps the organism it ran and exits 3 (the builder's fork seeds are its seed); every
# observation says echo/echo, 500 ms, started 2026-11-29T15:45:59+00:00, no CPU or memory,
# no ran_with; CALL is 10 tokens in, 4 out, USD 0.01.
def _row(lineage: str, generation: int, status: str, commit: str, **more: Any) -> dict[str, Any]:
    changed = status == "changed"
    died = status == "died"
    row: dict[str, Any] = {
        "lineage": lineage, "generation": generation, "status": status,
        "outcome": ("changed \u2014 organism +1/-0; 1 paths" if changed
                    else "process_exit" if died else "no-change"),
        "death_cause": "process_exit" if died else None, "exit_status": 3 if died else 0,
        "model_failure": None, "organism_bytes": 57 if changed else 48,
        "organism_added": None if died else int(changed),
        "organism_deleted": None if died else 0,
        "paths_changed": None if died else int(changed),
        "model_calls": 1 if changed else 0, "tokens_in": 10 if changed else None,
        "tokens_out": 4 if changed else None, "spend_usd": "0.01" if changed else "0",
        "cpu_seconds": None, "memory_peak_bytes": None, "wall_seconds": 0.5,
        "started_at": "2026-11-29T15:45:59+00:00", "external_edits_before": 0,
        "provider": "echo", "model": "echo", "lineage_commit": commit, "observed": True,
        "kernel_commit": None, "kernel_fingerprint": None, "ran_with": "not-recorded",
        "truncated_calls": 0, "stops_lineage": False, "usage_exceeds_request": False,
        "set": None, "cell": None, "replica": None, "orphaned": None, "epoch": None,
        "parent_lineage": None, "parent_generation": None,
        "absolute_generation": generation,
        "probe.shape.bytes": None, "probe.shape.note": None, "probe.shape.ok": None,
        "probe_failure.shape": None, "matrix.ceilings.wall": None,
    }
    for key, value in more.items():
        row[key.replace("__", ".")] = value
    return row


def _seed(lineage: str, commit: str, **more: Any) -> dict[str, Any]:
    """Row 0: the seed (its root commit, the 48-byte seed organism: every builder's seed,
    a fork's too); no life made it, so no observation and nothing it records; no probe
    measured it here."""
    row = {key: None for key in _row(lineage, 0, "no-change", commit)}
    row.update({"lineage": lineage, "generation": 0, "status": "seed", "outcome": "seed",
                "organism_bytes": 48, "external_edits_before": 0, "lineage_commit": commit,
                "observed": False, "absolute_generation": 0})
    for key, value in more.items():
        row[key.replace("__", ".")] = value
    return row


def grow(state: Path, specs: Path) -> tuple[list[dict[str, Any]], list[str], str]:
    """The lineages, and the table they make (written by hand), the members' names and
    their cell (as the spec names them)."""
    specs.write_text(SPECS.replace("MEMBER", "evo-placeholder"))
    members = [spec for spec in load_specs([specs], state_dir=state) if spec.set_name]
    first, second = (spec.name for spec in members)
    cell = members[0].member.cell if members[0].member else None
    specs.write_text(SPECS.replace("MEMBER", first))
    one = LineageBuilder(state, first)
    a1, a2 = one.gen("changed", calls=[CALL]), one.gen("changed", calls=[CALL])
    a3 = one.gen("no-change")
    _probe(one.paths, 1, a1, {"bytes": 57, "note": NOTE, "ok": True}, None)
    _probe(one.paths, 2, a2, None, "exit status 3")  # gen 3: not measured
    two = LineageBuilder(state, second)
    b1 = two.gen("died")
    kid = ForkBuilder(state, "kid", fork_record(first, one.seed, 2, a2))
    k1 = kid.gen("changed", calls=[CALL])
    grandkid = ForkBuilder(state, "grandkid", fork_record("kid", kid.seed, 1, k1))
    g1 = grandkid.gen("no-change")
    member = {"set": "evo", "cell": cell, "orphaned": False, "matrix__ceilings__wall": "60s"}
    table = [
        _seed(first, one.seed, replica=0, **member),
        _row(first, 1, "changed", a1, replica=0, probe__shape__bytes=57,
             probe__shape__note=NOTE, probe__shape__ok=True, **member),
        _row(first, 2, "changed", a2, replica=0, probe_failure__shape="exit status 3",
             **member),
        _row(first, 3, "no-change", a3, replica=0, organism_bytes=57, **member),  # gen 2's
        _seed(second, two.seed, replica=1, **member),
        _row(second, 1, "died", b1, replica=1, **member),
        # kid is gen 2 of the first member's line: its seed is the line's gen 2, its gen 1
        # the line's gen 3
        _seed("kid", kid.seed, parent_lineage=first, parent_generation=2,
              absolute_generation=2),
        _row("kid", 1, "changed", k1, parent_lineage=first, parent_generation=2,
             absolute_generation=3),
        _seed("grandkid", grandkid.seed, parent_lineage="kid", parent_generation=1,
              absolute_generation=3),
        _row("grandkid", 1, "no-change", g1, parent_lineage="kid", parent_generation=1,
             absolute_generation=4),
    ]
    return table, [first, second], str(cell)
