"""What a lineage is now: its three places, read through ``state.repos``. Read-only.

Rule: nothing here writes (no ref, index, object or file), and nothing here
raises for a damaged lineage: what cannot be read becomes a ``ReadProblem``
whose code is the refusal reason the planner will give.

Reading is O(1)-ish in the length of the history, so that planning a fleet
stays fast: the generation count is the number ``N`` of the newest
first-parent ``gen N:`` commit (walking back from the branch head only past
non-generation commits), cross-checked with the observation branch, whose
``generations/NNNN.json`` must number ``1..N`` and whose record ``N`` must name
that exact commit. Only when that cross-check fails is the whole first-parent
history walked (to report exact numbers). The full O(history) audit of both
repositories is ``ouro verify``'s job.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pygit2

from reconciler.errors import StateError
from reconciler.kernel.base import formats
from reconciler.kernel.base.config import (
    GENERATION_SCHEMA,
    LINEAGE_SCHEMA,
    METADATA_FILE,
    OBSERVATIONS_SCHEMA,
    LineagePaths,
)
from reconciler.kernel.base.refusals import ProblemCode
from reconciler.ownfiles import read_regular
from reconciler.state import observed_cache
from reconciler.state.branches import (
    DeclaredSpec,
    Recorded,
    names_another,
    recorded_branches,
    spec_paths,
)
from reconciler.state.forks import birth_cut_off
from reconciler.state.holders import held_by
from reconciler.state.observed import (
    GenerationCommit,
    Interrupted,
    InterruptedKind,
    Observed,
    ReadProblem,
)
from reconciler.state.probes import coverage as probe_coverage
from reconciler.state.probes import metrics as probe_metrics
from reconciler.state.repos import (
    READ_ERRORS,
    Absent,
    Lineage,
    NewestUnreadable,
    Repo,
    Unreadable,
    first_line,
    observation_name,
)
from reconciler.state.stops import read_stop
from reconciler.state.worktree import clean_as_listed
from reconciler.state.worktree import dirty as worktree_dirty

__all__ = [
    "INTENT_MARKER",
    "GenerationCommit",
    "Interrupted",
    "Observed",
    "ReadProblem",
    "observe",
    "observe_spec",
]

INTENT_MARKER = formats.MARKER_FILE  # the kernel's name, kept under this module's spelling
_MAX_DIRTY_LISTED = 20

# ---------------------------------------------------------------- helpers


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _first_held(
    repo: Repo, candidates: tuple[str | None, ...]
) -> tuple[str, pygit2.Commit] | None:
    """The first of ``candidates`` (recorded branch, then HEAD's) that names a commit."""
    for branch in dict.fromkeys(candidates):
        head = repo.head(branch) if branch else None
        if branch and head is not None:
            return branch, head
    return None


class _Problems:
    def __init__(self) -> None:
        self.items: list[ReadProblem] = []

    def add(self, code: ProblemCode, message: str) -> None:
        self.items.append(ReadProblem(code, message))


def _records_agree(paths: LineagePaths, lin: _LineageRead, obs: _ObservationRead,
                   problems: _Problems) -> bool:
    """Do the branches the lineage records provably equal ``paths``', from what was read?

    Then ``recorded_branches`` need not read them again: both branches were found and
    are checked out, and the observation metadata read (on the branch HEAD names) names
    exactly them, which is what ``recorded_branches`` would return.
    """
    if lin.head is None or obs.head is None or any(
            p.code == "branch-mismatch" for p in problems.items):
        return False
    meta = obs.metadata or {}
    return (meta.get("lineage_branch"), meta.get("observation_branch")) == (
        paths.branch, paths.observation_branch)


def _why(error: BaseException) -> BaseException:
    """What an ``Unreadable`` was caused by (its own text names the place again)."""
    return error.__cause__ or error


def _check_recorded(paths: LineagePaths, recorded: Recorded, problems: _Problems) -> None:
    """A branch the spec names that is not the one the lineage records: refuse, naming both."""
    for label, want, have, source in (
        ("branch", paths.branch, recorded.lineage, recorded.lineage_source),
        ("observation_branch", paths.observation_branch, recorded.observation,
         recorded.observation_source),
    ):
        if have is not None and have != want:
            recorded_name = names_another(have, paths.name) if label == "branch" else None
            named = (
                f": it is lineage {recorded_name!r}, and this spec is named {paths.name!r} "
                f"(rename the spec to {recorded_name!r}, give it a storage.path of its own, or "
                f"set storage.branch: {have} to adopt that lineage under this name)"
            ) if recorded_name is not None and want == f"lineage-{paths.name}" else ""
            problems.add(
                "branch-mismatch",
                f"the lineage records {label} {have!r} ({source}); the spec names {want!r}"
                + named,
            )


# ---------------------------------------------------------------- the lineage repo


@dataclass
class _LineageRead:
    repo: Repo | None = None
    head: pygit2.Commit | None = None
    head_branch: str | None = None
    branch: str | None = None  # the branch read: the spec's, else the one holding the lineage
    root: pygit2.Commit | None = None
    metadata: dict[str, Any] | None = None
    newest_gen: pygit2.Commit | None = None  # newest first-parent `gen ` commit
    newest_number: int | None = None
    generations: list[GenerationCommit] | None = None  # only after a full walk


def _read_lineage_repo(
    paths: LineagePaths, problems: _Problems, recorded: Callable[[], Recorded],
    repo: Repo | None,
) -> _LineageRead:
    read = _LineageRead()
    if repo is None:
        problems.add("not-a-lineage", f"{paths.git_dir} exists but is not a git repository")
        return read
    read.repo = repo
    read.head_branch = repo.head_branch()
    head = repo.head(paths.branch)
    read.branch = paths.branch
    if head is None:
        problems.add(
            "branch-mismatch",
            f"{paths.git_dir} has no branch {paths.branch!r}"
            + (f" (HEAD is on {read.head_branch!r})" if read.head_branch else ""),
        )
        # Refused, but what the lineage is is still reported: read the branch holding it.
        found = _first_held(repo, (recorded().lineage, read.head_branch))
        if found is None:
            return read
        read.branch, head = found
    read.head = head
    if read.head_branch != paths.branch and read.branch == paths.branch:
        problems.add(
            "branch-mismatch",
            f"{paths.git_dir} has {read.head_branch or 'a detached HEAD'!s} checked out, "
            f"not {paths.branch!r}",
        )
    # Newest generation commit: walk back from the head past non-generation commits.
    for commit in repo.first_parents(head):
        if formats.is_generation_subject(first_line(commit)):
            read.newest_gen = commit
            parsed = formats.parse_generation_subject(first_line(commit))
            read.newest_number = parsed.number if parsed else None
            break
        if not commit.parent_ids:
            read.root = commit
    return read


def _full_walk(repo: Repo, head: pygit2.Commit) -> tuple[
    list[GenerationCommit], pygit2.Commit
]:
    """Every first-parent generation commit, oldest first, and the root. O(history)."""
    found: list[pygit2.Commit] = []
    root = head
    for commit in repo.first_parents(head):
        root = commit
        if formats.is_generation_subject(first_line(commit)):
            found.append(commit)
    found.reverse()
    generations = []
    for index, commit in enumerate(found, start=1):
        parsed = formats.parse_generation_subject(first_line(commit))
        generations.append(
            GenerationCommit(index, parsed.status if parsed else None, str(commit.id))
        )
    return generations, root


def _root_via_first_observation(
    lin: _LineageRead, obs: _ObservationRead, paths: LineagePaths, problems: _Problems
) -> pygit2.Commit:
    """The root, found from the commit observation 1 names (usually one step from it).

    Observation 1 must name a ``gen 1`` commit of this lineage; if it does not, that
    is reported and the root is found the slow way, from the branch head.
    """
    assert lin.repo is not None and lin.head is not None
    named = _names(obs.record(1))
    first = lin.repo.commit(named) if named else None
    if first is None:
        problems.add(
            "observation-disagrees",
            f"{paths.observations}: observation 1 names commit {named}, which is not in "
            "the lineage",
        )
        return lin.repo.root(lin.head)
    parsed = formats.parse_generation_subject(first_line(first))
    if parsed is None or parsed.number != 1:
        problems.add(
            "unbalanced",
            f"{paths.observations}: observation 1 names {named}, which is "
            f"{first_line(first)!r}, not gen 1",
        )
    return lin.repo.root(first)


def _check_root(read: _LineageRead, paths: LineagePaths, problems: _Problems) -> None:
    assert read.repo is not None and read.root is not None
    root = read.root
    if first_line(root) != formats.SEED_SUBJECT:
        problems.add(
            "not-a-lineage",
            f"{paths.git_dir}: the root commit {root.id} of {paths.branch} is "
            f"{first_line(root)!r}, not 'seed'",
        )
        return
    try:
        metadata = read.repo.json(root.tree, METADATA_FILE)
    except Absent:
        problems.add(
            "no-metadata",
            f"{paths.git_dir}: the seed commit has no {METADATA_FILE} (an older instrument's "
            "lineage)",
        )
        return
    except Unreadable as error:
        problems.add("no-metadata", f"{paths.git_dir}: {METADATA_FILE} is unreadable: "
                     f"{_why(error)}")
        return
    if not isinstance(metadata, dict) or metadata.get("schema") != LINEAGE_SCHEMA:
        schema = metadata.get("schema") if isinstance(metadata, dict) else None
        problems.add(
            "no-metadata",
            f"{paths.git_dir}: {METADATA_FILE} has schema {schema!r}, not {LINEAGE_SCHEMA!r}",
        )
        return
    read.metadata = metadata


# ---------------------------------------------------------------- the observation repo


@dataclass
class _ObservationRead:
    repo: Repo | None = None
    head: pygit2.Commit | None = None
    branch: str | None = None  # the branch read: the spec's, else the one holding them
    metadata: dict[str, Any] | None = None
    generations_tree: pygit2.Tree | None = None
    count: int = 0
    last: dict[str, Any] | None = None
    records: dict[int, dict[str, Any] | None] = field(default_factory=dict)

    def record(self, n: int) -> dict[str, Any] | None:
        """Observation ``n`` (1-based), or None if absent or unreadable."""
        if n in self.records:
            return self.records[n]
        value: dict[str, Any] | None = None
        if self.repo is not None and self.generations_tree is not None and n >= 1:
            try:
                data = self.repo.json(self.generations_tree, observation_name(n))
                if isinstance(data, dict) and data.get("schema") == GENERATION_SCHEMA:
                    value = data
            except StateError:
                value = None
        self.records[n] = value
        return value


def _read_observation_repo(
    paths: LineagePaths, problems: _Problems, recorded: Callable[[], Recorded],
    repo: Repo | None,
) -> _ObservationRead:
    read = _ObservationRead()
    where = paths.observations
    if repo is None:
        problems.add("not-a-lineage", f"{where} exists but is not a git repository")
        return read
    read.repo = repo
    checked_out = repo.head_branch()
    head = repo.head(paths.observation_branch)
    read.branch = paths.observation_branch
    if head is None:
        problems.add(
            "branch-mismatch",
            f"{where} has no branch {paths.observation_branch!r}"
            + (f" (HEAD is on {checked_out!r})" if checked_out else ""),
        )
        found = _first_held(repo, (recorded().observation, checked_out))
        if found is None:
            return read
        read.branch, head = found
    read.head = head
    if checked_out != paths.observation_branch and read.branch == paths.observation_branch:
        problems.add(
            "branch-mismatch",
            f"{where} has {checked_out or 'a detached HEAD'} checked out, "
            f"not {paths.observation_branch!r}",
        )
    tree = head.tree
    try:
        metadata = repo.json(tree, formats.OBSERVATION_METADATA_FILE)
    except Absent:
        problems.add("observation-disagrees", f"{where}: no {formats.OBSERVATION_METADATA_FILE}")
        metadata = None
    except Unreadable as error:
        problems.add("observation-disagrees",
                     f"{where}: unreadable metadata.json: {_why(error)}")
        metadata = None
    if metadata is not None:
        if isinstance(metadata, dict) and metadata.get("schema") == OBSERVATIONS_SCHEMA:
            read.metadata = metadata
        else:
            problems.add(
                "observation-disagrees",
                f"{where}: metadata.json is not an {OBSERVATIONS_SCHEMA} document",
            )
    generations = repo.tree(tree, formats.GENERATIONS_DIR)
    if generations is not None:
        read.generations_tree = generations
        read.count = len(generations)
        if read.count:
            read.last = read.record(read.count)
            if read.last is None:
                problems.add(
                    "unbalanced",
                    f"{where}: {read.count} files under generations/ but "
                    f"{formats.observation_path(read.count)} is missing or unreadable "
                    "(records must be numbered 1..N)",
                )
            elif read.last.get("generation") != read.count:
                problems.add(
                    "unbalanced",
                    f"{where}: {formats.observation_path(read.count)} says generation "
                    f"{read.last.get('generation')!r}",
                )
    return read


# ---------------------------------------------------------------- cross-checks


def _names(record: dict[str, Any] | None) -> str | None:
    value = record.get("lineage_commit") if record else None
    return value if isinstance(value, str) else None


def _fast_agrees(lin: _LineageRead, obs: _ObservationRead) -> bool:
    """The O(1) check: newest `gen N:` commit is observation N's commit, N files observed."""
    if lin.head is None or obs.head is None:
        return False
    if lin.newest_gen is None:
        return obs.count in (0, 1)
    number = lin.newest_number
    if number is None or obs.count not in (number, number + 1):
        return False
    return _names(obs.record(number)) == str(lin.newest_gen.id)


def _compare_with_history(
    lin: _LineageRead, obs: _ObservationRead, paths: LineagePaths, problems: _Problems
) -> None:
    """After a full walk: say precisely where the two repositories disagree."""
    assert lin.repo is not None and lin.generations is not None
    k, m = len(lin.generations), obs.count
    if lin.newest_number is not None and lin.newest_number != k:
        problems.add(
            "unbalanced",
            f"{paths.git_dir}: the newest generation commit is numbered {lin.newest_number} "
            f"but {k} generation commits are on {paths.branch}",
        )
    if m not in (k, k + 1):
        problems.add(
            "unbalanced",
            f"{paths.branch} has {k} generation commits but {paths.observations} has "
            f"{m} observations",
        )
    for gen in lin.generations[-1:] if m in (k, k + 1) else []:
        named = _names(obs.record(gen.number))
        if named == gen.commit:
            continue
        if named is None or lin.repo.commit(named) is None:
            problems.add(
                "observation-disagrees",
                f"{paths.observations}: observation {gen.number} names commit {named}, "
                f"which is not in the lineage (gen {gen.number} is {gen.commit})",
            )
        else:
            problems.add(
                "unbalanced",
                f"{paths.observations}: observation {gen.number} names {named}, "
                f"but gen {gen.number} on {paths.branch} is {gen.commit}",
            )


_MAX_MARKER_BYTES = 1 << 20  # an intent marker is a few hundred bytes


def _read_marker(git_dir: Path) -> tuple[bool, dict[str, Any] | None]:
    if not os.path.lexists(os.path.join(git_dir, INTENT_MARKER)):
        return False, None  # (asked by name first: this runs for every lineage of a fleet)
    try:  # a link, a FIFO or a marker past the bound: there, but none to read
        data = json.loads(read_regular(git_dir / INTENT_MARKER, _MAX_MARKER_BYTES) or b"null")
    except (OSError, ValueError):
        return True, None
    valid = isinstance(data, dict) and data.get("schema") == formats.MARKER_SCHEMA
    return True, data if valid else None


_REMEDY = {
    "roll-forward": "apply moves the branch to it",
    "cleanup": "apply resets the worktree and drops the marker",
    "discard": "apply discards it (it re-runs; its model spend is recorded)",
}


def _interrupted(
    paths: LineagePaths,
    lin: _LineageRead,
    obs: _ObservationRead,
    generations: int,
    newest: str | None,
    problems: _Problems,
) -> Interrupted | None:
    """The kernel's classification of the leftovers (``kernel.leftovers``), as observed."""
    # (imported here: a lineage observed from its record never asks, and the kernel's
    # transaction modules cost an in-sync plan more than its own work)
    from reconciler.kernel.transaction import leftovers
    from reconciler.kernel.transaction.recovery import marker_alive

    assert lin.repo is not None and lin.head is not None
    marker_present, marker = _read_marker(paths.git_dir)
    if marker is not None and marker_alive(marker):
        problems.add(
            "generation-running",
            f"generation {marker.get('generation')} is running in process {marker.get('pid')} "
            f"({paths.git_dir / INTENT_MARKER})",
        )
    pending = problem = None
    if obs.count == generations + 1:
        pending = _names(obs.last)
        problem = leftovers.pending_problem(lin.repo.raw, lin.head, pending, obs.count)
    found = leftovers.classify_leftovers(
        generations=generations, observed=obs.count, head=str(lin.head.id),
        newest_observed=not generations or (
            newest is not None and _names(obs.record(generations)) == newest),
        pending=pending, pending_problem=problem, marker_present=marker_present, marker=marker,
    )
    if found.kind == "unbalanced" and problem is not None:
        problems.add("unbalanced", f"{paths.observations}: {found.detail}")
    elif found.kind == "stray-marker":
        problems.add("unbalanced", f"{paths.git_dir / INTENT_MARKER}: {found.detail}: "
                     "leftovers a human must look at")
    if found.kind not in leftovers.ACTIONABLE:
        return None
    kind: InterruptedKind = (
        "roll-forward" if found.kind == "roll-forward"
        else "cleanup" if found.kind == "cleanup" else "discard"
    )
    where = paths.branch if kind == "roll-forward" else paths.git_dir / INTENT_MARKER
    return Interrupted(kind, found.generation if marker is not None or kind == "roll-forward"
                       else None, found.lineage_commit, found.phase,
                       f"{where}: {found.detail}: {_REMEDY[kind]}")


def _damage(paths: LineagePaths, problems: _Problems) -> None:
    """What the kernel refuses to run through (``DamageError``), seen at plan time too."""
    from reconciler.kernel.transaction.publish import ref_locks  # (and tenacity: 10 ms)

    if os.path.islink(paths.worktree):
        problems.add(
            "damaged",
            f"the worktree {paths.worktree} is a symlink (to {os.readlink(paths.worktree)}), "
            "not the lineage's own folder",
        )
    for lock in ref_locks(paths):
        problems.add("damaged", f"{lock} was left behind by a git command")


# ---------------------------------------------------------------- observe


def observe(paths: LineagePaths, cache_dir: Path | None = None, *,
            opened: Lineage | None = None,
            known: tuple[observed_cache.Heads, observed_cache.Recalled | None] | None = None
            ) -> Observed:
    """Read a lineage's three places. Never raises for a damaged lineage: it reports.

    With ``cache_dir`` (the summaries' folder of the state dir), a lineage found whole
    and in order is kept there by its heads (``state.observed_cache``), and observed
    again from that record while its refs are unchanged: only what lives outside the
    objects (the marker, ref locks, the lock's holder, the worktree) is read again.
    ``opened``: the lineage's repositories, opened already at these places; ``known``:
    the heads of ``paths`` read moments ago through them, and the record recalled there.
    """
    if birth_cut_off(paths):
        return unborn(paths)
    opened = opened if opened is not None else Lineage(paths)
    if cache_dir is None:
        return _observe(paths, opened)
    found, cached = known if known is not None else _recall(paths, opened, cache_dir)
    live = _live(cached, opened) if cached is not None else None
    if live is not None:
        return live
    observed = _observe(paths, opened)
    if (found.lineage, found.observation) == (observed.lineage_head,
                                              observed.observation_head):
        observed_cache.remember(cache_dir, observed, found, opened)  # read at ``found``
    return observed


def unborn(paths: LineagePaths) -> Observed:
    """A fork whose birth was cut off midway (``state.forks.birth_cut_off``): not born;
    its birth, made again, removes the leftovers first (``engine.forks.birth_fork``)."""
    return Observed(paths=paths, worktree_exists=False, git_dir_exists=False,
                    observations_exist=False, is_lineage=False, root_commit=None,
                    lineage_metadata=None, observation_metadata=None, lineage_head=None,
                    observation_head=None, head_branch=None, generations=0,
                    last_generation=None, observed_generations=0, last_observation=None,
                    dirty=False, dirty_paths=(), interrupted=None, problems=(),
                    full_walk=False, birth_cut_off=True)


def _recall(paths: LineagePaths, opened: Lineage, cache_dir: Path
            ) -> tuple[observed_cache.Heads, observed_cache.Recalled | None]:
    found = observed_cache.heads(paths, opened)
    return found, observed_cache.recall(cache_dir, paths, found)


def observe_spec(spec: DeclaredSpec, cache_dir: Path | None = None
                 ) -> tuple[LineagePaths, Observed]:
    """Where ``spec``'s lineage lives now (``branches.spec_paths``' answer, exactly) and
    ``observe`` there, opening each repository once for both.

    An in-sync lineage's record answers both: the branches its observation metadata
    records (``observed_cache.recorded``) are read from the record believed at the refs
    as they are now, and observe starts from that record (its live parts read again).
    """
    candidate = spec.paths()
    opened = Lineage(candidate)
    known: dict[LineagePaths, tuple[observed_cache.Heads, observed_cache.Recalled | None]] = {}

    def recorded(paths: LineagePaths) -> Recorded:
        if cache_dir is not None:
            found, cached = known[paths] = _recall(paths, opened, cache_dir)
            told = observed_cache.recorded(cached.observed, found) if cached else None
            if told is not None:
                return told
        return recorded_branches(paths, opened)

    paths = spec_paths(spec, recorded)
    return paths, observe(paths, cache_dir, opened=opened.at(paths), known=known.get(paths))


def _any_ref_lock(paths: LineagePaths) -> bool:
    """Is any of ``ref_locks``' files there? Asked by name first (string paths: this runs
    for every lineage of a fleet), and ``ref_locks`` itself only when one may be."""
    for git_dir, branch in ((paths.git_dir, paths.branch),
                            (f"{paths.observations}/.git", paths.observation_branch)):
        if os.path.lexists(f"{git_dir}/refs/heads/{branch}.lock"):
            from reconciler.kernel.transaction.publish import ref_locks

            return bool(ref_locks(paths))
    return False


def _live(recalled: observed_cache.Recalled, opened: Lineage) -> Observed | None:
    """A cached observation with what lives outside the objects read now; None when any
    of it is not as the record assumes (then the lineage is observed in full). The
    worktree is checked against the head's tree listing the record holds, without
    opening the repository; when that cannot prove it clean, as ``_observe`` does."""
    cached = recalled.observed
    paths = cached.paths
    try:
        if not (stat.S_ISDIR(os.lstat(paths.worktree).st_mode) and _exists(paths.git_dir)
                and _exists(paths.observations)) \
                or _read_marker(paths.git_dir)[0] or _any_ref_lock(paths):
            return None
        if recalled.tree is not None and recalled.listing is not None and clean_as_listed(
                paths, recalled.tree, recalled.listing):
            dirty: tuple[str, ...] = ()
            problem: str | None = None
        else:
            repo = opened.lineage
            head = repo.head(paths.branch, whole=cached.lineage_head) if repo else None
            if repo is None or head is None or str(head.id) != cached.lineage_head:
                return None
            dirty, problem = worktree_dirty(paths, repo.raw, head)
    except READ_ERRORS:
        return None
    holder = held_by(paths.git_dir)
    if not dirty and problem is None and holder is None:
        return cached  # (its live parts are what the record was made with)
    return replace(
        cached, dirty=bool(dirty), dirty_paths=dirty[:_MAX_DIRTY_LISTED],
        problems=(ReadProblem("partial-paths", problem),) if problem is not None else (),
        held_by=holder)


def _observe(paths: LineagePaths, opened: Lineage) -> Observed:
    """``observe``, reading everything (``opened``: the lineage's repositories).

    Longer than 80 lines because it is one pass over the three places in a fixed
    order (the fast check, else the full walk; the root, leftovers, the worktree),
    sharing what each step read, under the one ``except`` that turns a damaged
    repository into a reported problem.
    """
    problems = _Problems()
    worktree_exists = _exists(paths.worktree)
    git_dir_exists = _exists(paths.git_dir)
    observations_exist = _exists(paths.observations)
    lin = _LineageRead()
    obs = _ObservationRead()
    full_walk = False
    generations = 0
    last: GenerationCommit | None = None
    dirty: tuple[str, ...] = ()
    interrupted: Interrupted | None = None
    unreadable = False
    try:
        recorded = functools.cache(lambda: recorded_branches(paths))  # read only if needed
        if git_dir_exists:
            lin = _read_lineage_repo(paths, problems, recorded, opened.lineage)
        if observations_exist:
            obs = _read_observation_repo(paths, problems, recorded, opened.observations)
        if lin.repo is not None and lin.head is not None:
            if _fast_agrees(lin, obs):
                generations = lin.newest_number or 0
                if lin.newest_gen is not None:
                    parsed = formats.parse_generation_subject(first_line(lin.newest_gen))
                    status = parsed.status if parsed is not None else None
                    last = GenerationCommit(generations, status, str(lin.newest_gen.id))
                if lin.root is None:
                    lin.root = _root_via_first_observation(lin, obs, paths, problems)
            else:
                full_walk = True
                lin.generations, lin.root = _full_walk(lin.repo, lin.head)
                generations = len(lin.generations)
                last = lin.generations[-1] if lin.generations else None
                if obs.head is not None:
                    _compare_with_history(lin, obs, paths, problems)
            _check_root(lin, paths, problems)
            interrupted = _interrupted(paths, lin, obs, generations,
                                       last.commit if last is not None else None, problems)
        if (git_dir_exists or observations_exist) and not _records_agree(
                paths, lin, obs, problems):
            _check_recorded(paths, recorded(), problems)
        _damage(paths, problems)
        if worktree_exists and lin.head is not None and not os.path.islink(paths.worktree):
            dirty, problem = worktree_dirty(paths, lin.repo.raw if lin.repo else None, lin.head)
            if problem is not None:
                problems.add("partial-paths", problem)
    except NewestUnreadable as error:
        problems.add("damaged", str(error))
        unreadable = True  # nothing more is read (libgit2 could loop forever on it)
    except READ_ERRORS as error:
        # A corrupt object or ref: report it (observe never raises for a damaged lineage).
        problems.add(
            "not-a-lineage",
            f"lineage {paths.label}: its repositories cannot be read "
            f"({type(error).__name__}: {error}); run `ouro verify` or `git fsck` on them",
        )
    if git_dir_exists or worktree_exists or observations_exist:
        missing = [
            str(place)
            for place, present in (
                (paths.worktree, worktree_exists),
                (paths.git_dir, git_dir_exists),
                (paths.observations, observations_exist),
            )
            if not present
        ]
        if missing:
            problems.add("partial-paths", "missing: " + ", ".join(missing))
    is_lineage = (
        lin.head is not None
        and lin.root is not None
        and first_line(lin.root) == formats.SEED_SUBJECT
    )
    return Observed(
        paths=paths,
        worktree_exists=worktree_exists,
        git_dir_exists=git_dir_exists,
        observations_exist=observations_exist,
        is_lineage=is_lineage,
        root_commit=str(lin.root.id) if lin.root is not None else None,
        lineage_metadata=lin.metadata,
        observation_metadata=obs.metadata,
        lineage_head=str(lin.head.id) if lin.head is not None else None,
        observation_head=str(obs.head.id) if obs.head is not None else None,
        head_branch=lin.head_branch,
        generations=generations,
        last_generation=last,
        observed_generations=obs.count,
        last_observation=obs.last,
        dirty=bool(dirty),
        dirty_paths=dirty[:_MAX_DIRTY_LISTED],
        interrupted=interrupted,
        problems=tuple(problems.items),
        full_walk=full_walk,
        branches_read={"lineage": lin.branch if lin.head is not None else None,
                       "observation": obs.branch if obs.head is not None else None},
        held_by=held_by(paths.git_dir),
        newest_unreadable=unreadable,
        probe_coverage=probe_coverage(paths, obs.repo) if observations_exist and not unreadable
        else {},
        probe_metrics=probe_metrics(paths, obs.repo) if observations_exist and not unreadable
        else {},
        stopped=read_stop(paths) if git_dir_exists else None,
    )
