"""Recovery: make a lineage's two repositories agree again after a crash at any instant.

Trusted harness. A generation publishes in this order (see ``generation``):
intent marker -> lineage commit object C (on no branch) -> marker "publishing"
-> observation naming C (compare-and-swap) -> lineage branch H -> C
(compare-and-swap) -> worktree rewritten -> marker removed. So after a crash:

- an observation names C, C's parent is the branch head: roll forward (move the
  branch, rewrite the worktree);
- a marker and no observation for its generation: discard (the generation
  re-runs); its model spend, read from the broker's audit file, is committed to
  the observation repo as ``interrupted/NNNN-<stamp>.json`` -- not a generation;
- a marker for a generation that is fully published: reset the worktree, drop
  the marker;
- anything else (observations and generation commits disagree in another way)
  is a ``RecoveryError`` for a human.

The worktree is reset to the branch whenever the marker says "publishing", so
a half-written worktree never looks like a human's edit. Every step is
idempotent: a second ``recover`` finds nothing to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pygit2

from ..base.config import LineagePaths
from ..base.errors import KernelError, PreflightError, RecoveryError
from ..base.formats import (
    GENERATIONS_DIR,
    INTERRUPTED_DIR,
    calls_spend,
    is_generation_subject,
    observation_path,
    parse_generation_subject,
)
from . import publish
from .leftovers import Leftovers, classify_leftovers, pending_problem

__all__ = [
    "INTERRUPTED_DIR",
    "INTERRUPTED_SCHEMA",
    "KERNEL_DIR_PREFIX",
    "ORPHAN_AGE_S",
    "RecoveryReport",
    "count_generations",
    "count_observations",
    "discard",
    "interrupted_path",
    "interrupted_subject",
    "kernel_temp_root",
    "recover",
    "scope_prefix",
    "sweep_orphans",
    "walk_first_parent",
]

INTERRUPTED_SCHEMA = "ouro-interrupted-generation/v1"
KERNEL_DIR_PREFIX = "ouro-kernel-"

Action = Literal["none", "rolled-forward", "discarded", "cleaned-up"]


def interrupted_path(generation: int, stamp: str) -> str:
    """Where a discarded attempt's spend is recorded in the observation repo."""
    return f"{INTERRUPTED_DIR}/{generation:04d}-{stamp}.json"


def interrupted_subject(generation: int) -> str:
    return f"observe: interrupted gen {generation} (discarded)"


@dataclass(frozen=True)
class RecoveryReport:
    action: Action
    generation: int | None = None
    lineage_commit: str | None = None
    interrupted_record: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        return self.detail or self.action


# ---------------------------------------------------------------- reading both repos


def count_generations(head: pygit2.Commit) -> tuple[int, pygit2.Commit | None]:
    """Generation commits in first-parent history, and the newest of them."""
    count, newest, _ = walk_first_parent(head)
    return count, newest


def walk_first_parent(
    head: pygit2.Commit,
) -> tuple[int, pygit2.Commit | None, pygit2.Commit]:
    """(generation commits, the newest of them, the root) of first-parent history."""
    count, newest = 0, None
    commit = head
    while True:
        if is_generation_subject(commit.message.split("\n", 1)[0]):
            count += 1
            newest = newest or commit
        if not commit.parents:
            return count, newest, commit
        commit = commit.parents[0]


def count_observations(repo: pygit2.Repository, head: pygit2.Commit) -> int:
    if GENERATIONS_DIR not in head.tree:
        return 0
    tree = repo[head.tree[GENERATIONS_DIR].id]
    if not isinstance(tree, pygit2.Tree):
        return 0
    return sum(1 for item in tree if (item.name or "").endswith(".json"))


def read_observation(
    repo: pygit2.Repository, head: pygit2.Commit, generation: int
) -> dict[str, Any] | None:
    try:
        blob = repo[head.tree[observation_path(generation)].id]
        if not isinstance(blob, pygit2.Blob):
            return None
        value = json.loads(blob.data)
    except (KeyError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# ---------------------------------------------------------------- helpers


def marker_alive(marker: dict[str, Any]) -> bool:
    """Is the process that wrote the marker still running (same pid AND same start time)?

    One home for plan and apply: a marker without its writer's start time, or naming a
    live process that started at another time (an unrelated process that got the pid),
    is a dead writer's, and its generation is recovered."""
    pid, start = marker.get("pid"), marker.get("pid_start")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid():
        return False
    if not isinstance(start, str):
        return False
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return len(fields) > 19 and fields[0] != "Z" and fields[19] == start


def kernel_temp_root() -> Path:
    """Where an attempt's kernel and broker dirs are made: the temp dir, unless its path is
    too long for the AF_UNIX socket inside (108 bytes), then /tmp."""
    root = Path(tempfile.gettempdir()).resolve()
    return root if len(str(root)) <= 48 else Path("/tmp")


def scope_prefix(paths: LineagePaths) -> str:
    """``<name>.<digest>.`` begins the cgroup scope names of a lineage's generations.

    Cgroups are host-wide, and two lineages may share a name (two state dirs, two
    users), so the digest of the git dir's path tells them apart; lineage names have
    no dot, so no lineage's prefix is another's.
    """
    base = re.sub(r"[^a-z0-9-]", "-", paths.name.lower()).strip("-")[:50] or "lineage"
    place = hashlib.sha256(os.fsencode(os.path.abspath(paths.git_dir))).hexdigest()[:10]
    return f"{base}.{place}."


def _reap_scopes(paths: LineagePaths, patience: float = 3.0) -> None:
    """Remove the cgroups left by killed attempts of this lineage (the caller holds its
    lock). A sandbox dies with its kernel, but not in the same instant: its groups
    empty within moments, so this waits for that, a little."""
    from ..sandbox.ceilings import PARENT, discover_mounts, reap_stale_scopes

    prefix = scope_prefix(paths)
    deadline = time.monotonic() + patience
    with contextlib.suppress(Exception):
        mounts = discover_mounts()
        parents = [m / PARENT for m in dict.fromkeys(mounts.v1.values())]
        parents += [mounts.v2 / PARENT] if mounts.v2 is not None else []
        while True:
            reap_stale_scopes(prefix, mounts=mounts)
            left = [p for parent in parents if parent.is_dir() for p in parent.glob(prefix + "*")]
            if not left or time.monotonic() > deadline:
                return
            time.sleep(0.05)


ORPHAN_AGE_S = 600.0


def sweep_orphans(paths: LineagePaths, marker: dict[str, Any] | None, *, min_age: float) -> None:
    """Remove what attempts of this lineage killed before writing their marker left: broker
    private dirs under the git dir and kernel/broker dirs in the temp root, except those
    ``marker`` names and those younger than ``min_age`` seconds (an attempt of another
    process may be just starting; with the lineage's lock held, 0 is safe)."""
    keep = {
        str(Path(value).resolve())
        for key in ("private_dir", "kernel_dir", "broker_dir")
        if marker is not None and isinstance(value := marker.get(key), str)
    }
    candidates: list[Path] = []
    private_root = Path(paths.git_dir) / publish.PRIVATE_DIR
    with contextlib.suppress(OSError):
        candidates += [p for p in private_root.iterdir() if p.is_dir()]
    with contextlib.suppress(OSError):
        prefix = KERNEL_DIR_PREFIX + scope_prefix(paths)
        candidates += [p for p in kernel_temp_root().glob(prefix + "*") if p.is_dir()]
    now = time.time()
    for candidate in candidates:
        try:
            if str(candidate.resolve()) in keep or now - candidate.stat().st_mtime < min_age:
                continue
        except OSError:
            continue
        shutil.rmtree(candidate, ignore_errors=True)


def _remove_leftovers(paths: LineagePaths, marker: dict[str, Any] | None) -> None:
    """The attempt's private dir (under the git dir) and kernel dir (a temp dir), if ours."""
    if marker is None:
        return
    private_root = (Path(paths.git_dir) / publish.PRIVATE_DIR).resolve()
    private = marker.get("private_dir")
    if isinstance(private, str):
        candidate = Path(private).resolve()
        if candidate.parent == private_root:
            shutil.rmtree(candidate, ignore_errors=True)
    for key in ("kernel_dir", "broker_dir"):
        value = marker.get(key)
        if isinstance(value, str):
            candidate = Path(value).resolve()
            if (
                candidate.name.startswith(KERNEL_DIR_PREFIX)
                and candidate.parent == kernel_temp_root().resolve()
            ):
                shutil.rmtree(candidate, ignore_errors=True)


def _sync_observation_worktree(repo: pygit2.Repository, head: pygit2.Commit) -> None:
    from pygit2.enums import CheckoutStrategy

    publish.checkout_tree(repo, head.tree, CheckoutStrategy.FORCE)
    publish.set_index(repo, head.tree)


def _read_audit(private_dir: object) -> list[dict[str, Any]]:
    if not isinstance(private_dir, str):
        return []
    from ..broker.door import Broker

    return Broker.read_audit(Path(private_dir))


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


# ---------------------------------------------------------------- the cases


def discard(
    paths: LineagePaths,
    lineage: pygit2.Repository,
    observations: pygit2.Repository,
    marker: dict[str, Any] | None,
    generation: int,
    reason: str,
) -> RecoveryReport:
    """Record an unpublished attempt's spend, reset what it may have touched, drop the marker."""
    head = publish.branch_head(observations, paths.observation_branch)
    if head is None:
        raise RecoveryError(f"kernel: {paths.observations} has no {paths.observation_branch}")
    stamp = marker.get("attempt") if marker else None
    if not isinstance(stamp, str) or not stamp.replace(".", "").replace("-", "").isalnum():
        stamp = datetime.now().astimezone().strftime("%Y%m%dT%H%M%S.%f%z")
    record_path = interrupted_path(generation, stamp)
    calls = _read_audit(marker.get("private_dir") if marker else None)
    if record_path not in head.tree:  # idempotent: a second discard writes nothing
        record = {
            "schema": INTERRUPTED_SCHEMA,
            "generation": generation,
            "started_at": marker.get("started_at") if marker else None,
            "discarded_at": _now(),
            "reason": reason,
            "phase": marker.get("phase") if marker else None,
            "lineage_head": marker.get("lineage_head") if marker else None,
            "observation_head": marker.get("observation_head") if marker else None,
            "lineage_commit": marker.get("lineage_commit") if marker else None,
            "accounted_usd": str(calls_spend(calls)),
            "model_calls": calls,
        }
        data = (json.dumps(record, indent=2) + "\n").encode("utf-8")
        head = publish.commit_observation_files(
            observations, paths.observation_branch, head, {record_path: data},
            interrupted_subject(generation),
        )
    _sync_observation_worktree(observations, head)
    if marker is None or marker.get("phase") != "running":
        branch = publish.branch_head(lineage, paths.branch)
        if branch is not None:
            publish.checkout_worktree(lineage, branch)
    publish.remove_marker(paths)
    _remove_leftovers(paths, marker)
    return RecoveryReport(
        "discarded", generation, None, record_path,
        f"generation {generation} was interrupted before its observation: discarded "
        f"(it re-runs; spend ${calls_spend(calls)} recorded in {record_path})",
    )


def recover(paths: LineagePaths) -> RecoveryReport:
    """Roll forward or discard an interrupted generation; a no-op when there is none."""
    try:
        return _recover(paths)
    except (KernelError, RecoveryError):
        raise
    except (pygit2.GitError, OSError) as exc:
        raise RecoveryError(f"kernel: recovery of {paths.branch} failed: {exc}") from exc


def _recover(paths: LineagePaths) -> RecoveryReport:
    try:
        lineage = publish.open_lineage(paths)
        observations = publish.open_observations(paths)
    except PreflightError as exc:
        raise RecoveryError(str(exc)) from exc
    present, marker = publish.read_marker(paths)
    if marker is not None and marker_alive(marker):
        raise RecoveryError(
            f"kernel: generation {marker.get('generation')} of {paths.branch} is still running "
            f"(pid {marker.get('pid')}); let it finish or stop it first"
        )
    _reap_scopes(paths)
    sweep_orphans(paths, marker, min_age=0 if marker is not None or not present
                  else ORPHAN_AGE_S)
    head = publish.branch_head(lineage, paths.branch)
    obs_head = publish.branch_head(observations, paths.observation_branch)
    if head is None or obs_head is None:
        raise RecoveryError(f"kernel: {paths.branch} or {paths.observation_branch} is missing")
    counted = count_generations(head)
    generations = counted[0]
    found = leftovers_of(lineage, observations, head, obs_head, present, marker, counted)
    if found.kind == "roll-forward":
        assert found.lineage_commit is not None
        return _roll_forward(paths, lineage, observations, head, obs_head, found.lineage_commit,
                             marker)
    if found.kind == "unbalanced":
        raise RecoveryError(
            f"kernel: {paths.branch} and {paths.observations}: {found.detail}: "
            "unbalanced beyond recovery"
        )
    if found.kind == "none":
        return RecoveryReport("none", detail="nothing to recover")
    if found.kind == "discard" and marker is None:
        return discard(paths, lineage, observations, None, generations + 1,
                       "intent marker unreadable")
    if found.kind == "cleanup" and marker is not None:
        if marker.get("phase") != "running":
            publish.checkout_worktree(lineage, head)
        _sync_observation_worktree(observations, obs_head)
        publish.remove_marker(paths)
        _remove_leftovers(paths, marker)
        return RecoveryReport(
            "cleaned-up", generations, str(head.id), None,
            f"generation {generations} was published; worktree reset, marker dropped",
        )
    if found.kind == "discard":
        return discard(paths, lineage, observations, marker, generations + 1,
                       f"interrupted in phase {found.phase}")
    raise RecoveryError(
        f"kernel: {paths.branch}: {found.detail}: leftovers a human must look at "
        f"({publish.marker_path(paths)})"
    )


def leftovers_of(
    lineage: pygit2.Repository,
    observations: pygit2.Repository,
    head: pygit2.Commit,
    obs_head: pygit2.Commit,
    marker_present: bool,
    marker: dict[str, Any] | None,
    counted: tuple[int, pygit2.Commit | None] | None = None,
) -> Leftovers:
    """``leftovers.classify_leftovers`` on what the two repositories hold now
    (``counted``: ``count_generations(head)``, when the caller has it already)."""
    generations, newest = counted or count_generations(head)
    observed = count_observations(observations, obs_head)
    pending = problem = None
    if observed == generations + 1:
        record = read_observation(observations, obs_head, observed)
        named = record.get("lineage_commit") if record else None
        pending = named if isinstance(named, str) else None
        problem = pending_problem(lineage, head, named, observed)
    last = read_observation(observations, obs_head, generations) if generations else None
    return classify_leftovers(
        generations=generations, observed=observed, head=str(head.id),
        newest_observed=not generations or (
            newest is not None and last is not None
            and last.get("lineage_commit") == str(newest.id)),
        pending=pending, pending_problem=problem, marker_present=marker_present, marker=marker,
    )


def _roll_forward(
    paths: LineagePaths,
    lineage: pygit2.Repository,
    observations: pygit2.Repository,
    head: pygit2.Commit,
    obs_head: pygit2.Commit,
    commit: str,
    marker: dict[str, Any] | None,
) -> RecoveryReport:
    """Move the branch to ``commit``, which ``classify_leftovers`` found to be the observed
    next generation on top of ``head``."""
    target = lineage[commit]
    assert isinstance(target, pygit2.Commit)
    parsed = parse_generation_subject(target.message)
    assert parsed is not None
    number = parsed.number
    publish.cas_ref(lineage, paths.branch, head.id, target.id, f"ouro: roll forward gen {number}")
    publish.checkout_worktree(lineage, target)
    _sync_observation_worktree(observations, obs_head)
    publish.remove_marker(paths)
    _remove_leftovers(paths, marker)
    return RecoveryReport(
        "rolled-forward", number, str(target.id), None,
        f"generation {number} was observed but not published: rolled forward to "
        f"{str(target.id)[:12]}",
    )
