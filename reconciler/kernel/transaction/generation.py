"""One generation of a lineage, as a crash-safe transaction over two repositories.

Trusted harness; never mounted into a generation. The only judgement made here
is the exit status: 0 and a result the decoder accepts publishes, anything
else is a death that publishes nothing of the organism's.

    preflight   (reads only; PreflightError subclasses, nothing kept)
                identity vs the root commit's metadata, observation metadata,
                branches, balance, provider and key; then /kernel's manifest and
                model.sock (held by the kernel, ``relay.Door``), the broker starting on
                its own thread, the ceiling scope put in force
    1. uncommitted worktree edits -> commit `external edit` (CAS)     H
    2. intent marker <git_dir>/ouro-generation.json, phase running (exclusive)
    3. journal.md and input.tar into /kernel
    4. the sandbox runs one life under the ceilings; the door relays the
       organism's requests to the broker once that is up
    5. broker killed, its audit read; lineage commit object C (parent H), on no
       branch; marker phase publishing with C
    6. observation naming C on the observation branch (CAS from O)
    7. lineage branch H -> C (CAS); worktree and index rewritten to C
    8. marker removed

A crash at any point leaves what ``recovery.recover`` rolls forward or
discards; any failure past step 2 is settled by it before it propagates.
Test hook: ``kill_point(name)`` is called at each named point (``KILL_POINTS``);
the environment variable ``OURO_KERNEL_TEST_KILL_POINT=name`` makes the process
SIGKILL itself there (whoever sets the kernel's environment controls it anyway).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pygit2

from ..base import failures, totals
from ..base.config import (
    GENERATION_SCHEMA,
    JOURNAL_FILE,
    LINEAGE_SCHEMA,
    METADATA_FILE,
    OBSERVATIONS_SCHEMA,
    Ceilings,
    Identity,
    LineagePaths,
    ModelConfig,
    Provenance,
    constraints_manifest,
)
from ..base.errors import (
    DecoderRejection,
    DriftError,
    KernelError,
    RecoveryError,
)
from ..base.formats import (
    EXTERNAL_EDIT_SUBJECT,
    OBSERVATION_METADATA_FILE,
    PHYSICS_KEYS,
    Status,
    append_entry,
    calls_spend,
    journal_entry,
    observation_path,
    observation_subject,
    outcome_text,
    subject_changed,
    subject_died,
)
from ..broker.door import CAPABILITIES_FILE, SOCKET_FILE, capabilities, check_config
from ..broker.relay import Door
from . import faults, publish, recovery
from .leftovers import ACTIONABLE

if TYPE_CHECKING:
    from ..sandbox.ceilings import Scope
    from ..sandbox.decoder import Entry
    from ..sandbox.life import SandboxResult, StagedLife

__all__ = [
    "KILL_POINTS",
    "KILL_POINT_ENV",
    "GenerationCancelled",
    "GenerationOutcome",
    "Runtime",
    "check_extendable",
    "real_runtime",
    "run_generation",
]

KILL_POINTS = (
    "after-external-edit",
    "after-sandbox",
    "after-lineage-object",
    "after-observation-commit",
    "after-branch-move",
    "mid-worktree-write",
    "before-marker-removal",
)
KILL_POINT_ENV = "OURO_KERNEL_TEST_KILL_POINT"
OBSERVATION_TAIL_LINES = 20


class _Either(threading.Event):
    """Set when either event is (the sandbox polls ``is_set``)."""

    def __init__(self, own: threading.Event, other: threading.Event | None) -> None:
        super().__init__()
        self.own, self.other = own, other

    def is_set(self) -> bool:
        return self.own.is_set() or (self.other is not None and self.other.is_set())


def _write_manifest(kernel_dir: Path, constraints: dict[str, Any]) -> None:
    """/kernel/capabilities.json, exactly as the broker writes its own."""
    text = json.dumps(capabilities(constraints), indent=2, ensure_ascii=False) + "\n"
    (kernel_dir / CAPABILITIES_FILE).write_bytes(text.encode("utf-8"))


class GenerationCancelled(KernelError):
    """A generation stopped by the operator is discarded, never recorded as a death."""


@dataclass(frozen=True)
class GenerationOutcome:
    generation: int
    status: Status
    outcome: str  # the observation's outcome
    lineage_commit: str
    observation_commit: str
    accounted_usd: Decimal
    duration_ms: int
    exit_status: int
    external_edit: str | None = None  # the `external edit` commit made first, if any
    provider_failure: dict[str, Any] | None = None  # failures.provider_failure of its calls
    usage_exceeds_request: bool = False  # a provider reported more than a request could cost


class _BrokerLike(Protocol):
    def kill(self) -> None: ...


@dataclass(frozen=True)
class Runtime:
    """The kernel's moving parts; tests may replace them (the real ones by default)."""

    open_scope: Callable[[Ceilings, str], Scope]
    start_broker: Callable[..., _BrokerLike]
    run_sandbox: Callable[..., SandboxResult]
    decode: Callable[..., list[Entry]]
    read_audit: Callable[[Path], list[dict[str, Any]]]
    reap_scopes: Callable[[str], object]
    # the life's first process started in its scope ahead of the run (``life.stage``);
    # None: run_sandbox starts it, as tests' fake sandboxes do
    stage_sandbox: Callable[..., StagedLife] | None = None


def real_runtime() -> Runtime:
    from ..broker.door import Broker
    from ..sandbox.ceilings import open_scope, sweep_stale_scopes_seldom
    from ..sandbox.decoder import decode
    from ..sandbox.life import run_sandbox, stage
    from ..sandbox.seccomp_bpf import warm

    warm()  # the filter is built while the generation prepares (physics release 2)
    return Runtime(open_scope, Broker.start, run_sandbox, decode, Broker.read_audit,
                   sweep_stale_scopes_seldom, stage)


# ---------------------------------------------------------------- small helpers


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _env_kill_point(name: str) -> None:
    if os.environ.get(KILL_POINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _stderr_lines(stderr: bytes) -> list[str]:
    """Lines as ``tail`` sees them, less the empty lines at the very end (Emacs ends a
    backtrace with one): they would take a place among the five the journal keeps."""
    text = stderr.decode("utf-8", "replace").rstrip("\n")
    return text.split("\n") if text else []


def _blob_bytes(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> bytes | None:
    if path not in tree:
        return None
    blob = repo[tree[path].id]
    return blob.data if isinstance(blob, pygit2.Blob) else None


def _json_object(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _process_start(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


# ---------------------------------------------------------------- preflight


@dataclass(frozen=True)
class _State:
    lineage: pygit2.Repository
    observations: pygit2.Repository
    head: pygit2.Commit
    obs_head: pygit2.Commit
    generation: int  # the number the next generation gets


def _checked_out(repo: pygit2.Repository, branch: str, place: Path) -> None:
    ref = repo.references.get("HEAD")
    if ref is None or ref.type != pygit2.enums.ReferenceType.SYMBOLIC or (
        ref.target != f"refs/heads/{branch}"
    ):
        raise DriftError(
            f"kernel: {place} does not have {branch} checked out; check it out again",
            reason="branch-mismatch",
        )


def _inspect(paths: LineagePaths, identity: Identity) -> _State:
    """The preflight's reads, in the order a refusal is reported (``DriftError`` or
    ``RecoveryError``); nothing is written.

    Longer than 80 lines because each check is a paragraph with its own message and
    remedy, and their order is the rule (branches, physics, metadata, observations,
    leftovers); split, the order would be spread over several functions.
    """
    lineage = publish.open_lineage(paths)
    observations = publish.open_observations(paths)
    head = publish.branch_head(lineage, paths.branch)
    obs_head = publish.branch_head(observations, paths.observation_branch)
    if head is None:
        raise DriftError(f"kernel: {paths.git_dir} has no branch {paths.branch}",
                         reason="branch-mismatch")
    if obs_head is None:
        raise DriftError(
            f"kernel: {paths.observations} has no branch {paths.observation_branch}",
            reason="observation-disagrees",
        )
    _checked_out(lineage, paths.branch, Path(paths.worktree))
    _checked_out(observations, paths.observation_branch, Path(paths.observations))

    # The physics a lineage was born under are in its root commit; a later commit (an
    # external edit) cannot rewrite them.
    generations, newest, root = recovery.walk_first_parent(head)
    committed = _blob_bytes(lineage, root.tree, METADATA_FILE)
    metadata = _json_object(committed)
    if metadata is None or metadata.get("schema") != LINEAGE_SCHEMA:
        raise DriftError(
            f"kernel: {paths.branch} has no readable {METADATA_FILE} of schema {LINEAGE_SCHEMA}: "
            "it was not born under this instrument; start a new lineage",
            reason="no-metadata",
        )
    if metadata.get("instrument_commit") != identity.commit:
        raise DriftError(
            f"kernel: instrument commit differs: {paths.branch} was born under "
            f"{metadata.get('instrument_commit')}, this instrument is {identity.commit}; a "
            "lineage is only extended by the physics it was born under: start a new lineage",
            reason="instrument-commit-drift",
        )
    if metadata.get("instrument_fingerprint") != identity.fingerprint:
        raise DriftError(
            f"kernel: instrument fingerprint differs: {paths.branch} was born under "
            f"{metadata.get('instrument_fingerprint')}, this kernel is {identity.fingerprint}; "
            "its physics changed: start a new lineage",
            reason="fingerprint-drift",
        )
    try:
        on_disk: bytes | None = (Path(paths.worktree) / METADATA_FILE).read_bytes()
    except OSError:
        on_disk = None
    for place, value in (("the branch head", _blob_bytes(lineage, head.tree, METADATA_FILE)),
                         ("the worktree", on_disk)):
        if value != committed:
            raise DriftError(
                f"kernel: {METADATA_FILE} in {place} of {paths.branch} differs from the one "
                "the lineage was born with; it is kernel-owned: restore it before extending "
                "the lineage",
                reason="metadata-edited",
            )

    observed_meta = _json_object(
        _blob_bytes(observations, obs_head.tree, OBSERVATION_METADATA_FILE)
    )
    expected = {
        "schema": OBSERVATIONS_SCHEMA,
        "lineage_branch": paths.branch,
        "observation_branch": paths.observation_branch,
        **{key: metadata.get(key) for key in PHYSICS_KEYS},
    }
    wrong = sorted(k for k, v in expected.items() if (observed_meta or {}).get(k) != v)
    if observed_meta is None or wrong:
        raise DriftError(
            f"kernel: {paths.observations} does not agree with {paths.branch} "
            f"({', '.join(wrong) or OBSERVATION_METADATA_FILE}): start a new lineage",
            reason="observation-disagrees",
        )

    present, marker = publish.read_marker(paths)
    found = recovery.leftovers_of(lineage, observations, head, obs_head, present, marker,
                                  (generations, newest))
    if found.kind in ACTIONABLE:
        raise RecoveryError(
            f"kernel: {paths.branch} has leftovers of an interrupted generation "
            f"({found.detail}): recover it first (ouro apply does)"
        )
    if found.kind == "stray-marker":
        raise RecoveryError(f"kernel: {paths.branch}: {found.detail}: leftovers a human must "
                            f"look at ({publish.marker_path(paths)})")
    if found.kind == "unbalanced":
        raise DriftError(
            f"kernel: {paths.branch} and {paths.observations} do not match: {found.detail}",
            reason="unbalanced",
        )
    return _State(lineage, observations, head, obs_head, generations + 1)


def check_extendable(paths: LineagePaths, identity: Identity) -> None:
    """May ``identity`` extend this lineage? ``DriftError(reason=...)`` (or another
    ``PreflightError``/``RecoveryError``) if not. Reads only."""
    _inspect(paths, identity)


def _successes(calls: object) -> int:
    if not isinstance(calls, list):
        return 0
    return sum(1 for c in calls if isinstance(c, dict) and c.get("http_status") == 200)


def _replay_cursor(repo: pygit2.Repository, head: pygit2.Commit, count: int,
                   last: Mapping[str, Any]) -> int:
    """Replay responses consumed so far: model calls answered 200 in earlier observations.

    ouro records the running total (``replay_cursor``) in each observation, so only the
    last one (``last``: observation ``count``'s record) is read; without it every
    observation is counted.
    """
    if count == 0:
        return 0
    total = last.get("replay_cursor")
    if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
        return total
    return sum(
        _successes((recovery.read_observation(repo, head, number) or {}).get("model_calls"))
        for number in range(1, count + 1)
    )


def _totals_before(repo: pygit2.Repository, head: pygit2.Commit, count: int,
                   last: Mapping[str, Any]) -> totals.RunningTotals:
    """The lineage's running totals through generation ``count`` (physics release 4):
    observation ``count``'s record (``last``) holds them; without it (records another
    writer made or edited) every observation is added up, as the replay cursor is."""
    recorded = totals.from_json(last.get(totals.TOTALS_KEY))
    if recorded is not None and recorded.generations == count:
        return recorded
    added = totals.RunningTotals()
    for number in range(1, count + 1):
        added = totals.advance(added, recovery.read_observation(repo, head, number) or {})
    return added


def _check_provider(model: ModelConfig, api_key: str | None, generation: int, cursor: int) -> None:
    check_config(model, api_key, generation, cursor)


# ---------------------------------------------------------------- the generation


@dataclass
class _Parts:
    """What exists of one attempt (directories, door, broker, scope), for cleanup."""

    kernel_dir: Path  # mounted read-only at /kernel
    broker_dir: Path  # the broker's own socket and manifest; never mounted
    private_dir: Path
    scope: Scope | StagedLife | None = None  # until handed to the sandbox
    door: Door | None = None
    broker: _BrokerLike | None = None
    broker_error: BaseException | None = None
    starter: threading.Thread | None = None
    abort: threading.Event = dataclasses.field(default_factory=threading.Event)

    def start_broker(self, runtime: Runtime, **kwargs: Any) -> None:
        """Start the broker on its own thread: it comes up while the sandbox does."""

        def target() -> None:
            try:
                self.broker = runtime.start_broker(
                    kernel_dir=self.broker_dir, private_dir=self.private_dir, **kwargs)
            except BaseException as exc:  # handed to the main thread by ready()
                self.broker_error = exc
                if self.door is not None:
                    self.door.refuse()
                self.abort.set()  # a life without its model is no life: stop the sandbox
            else:
                if self.door is not None:
                    self.door.open(self.broker_dir / SOCKET_FILE)

        self.starter = threading.Thread(target=target, name="ouro-broker-start", daemon=True)
        self.starter.start()

    def ready(self) -> _BrokerLike:
        if self.starter is not None:
            self.starter.join()
        if self.broker_error is not None:
            raise self.broker_error
        assert self.broker is not None
        return self.broker

    def stop(self) -> None:
        """Stop whatever still runs (best effort: recovery reads the broker's audit anyway)."""
        if self.door is not None:
            self.door.close()
            self.door = None
        if self.starter is not None:
            self.starter.join()
        if self.broker is not None:
            with contextlib.suppress(Exception):
                self.broker.kill()
            self.broker = None
        if self.scope is not None:
            with contextlib.suppress(Exception):
                self.scope.close()
            self.scope = None


def _scope_name(paths: LineagePaths, generation: int) -> str:
    return f"{recovery.scope_prefix(paths)}gen{generation}.{os.getpid()}"


@dataclass(frozen=True)
class _Result:
    status: Status
    outcome: str
    tree: pygit2.Oid
    subject: str
    published_files: int | None
    published_bytes: int | None
    rejection: dict[str, Any] | None


def _classify(
    lineage: pygit2.Repository,
    head: pygit2.Commit,
    result: SandboxResult,
    ceilings: Ceilings,
    runtime: Runtime,
    n: int,
    journal: bytes,
    timestamp: str,
    note: str | None = None,
) -> _Result:
    """``note`` (the model's failure, e.g. ``model unavailable (401)``) is said by the
    journal heading and the subject of a no-change; a death's entry stays exit code and
    stderr, nothing else."""
    lines = _stderr_lines(result.stderr)
    accounting = result.accounting
    rejection: dict[str, Any] | None = None
    if result.exit_status == 0 and not result.wall_timeout and result.signal is None:
        try:
            if getattr(result, "archive_overflow", False):
                raise DecoderRejection("kernel: the result archive exceeds the worktree ceiling")
            from ..sandbox.decoder import path_budget

            entries = runtime.decode(
                result.archive, max_files=ceilings.worktree_files,
                max_bytes=ceilings.worktree_bytes, max_path_bytes=path_budget(lineage.workdir),
            )
            files = [
                publish.FileEntry(e.path, "symlink" if e.kind == "symlink" else "file", e.data,
                                  e.executable)
                for e in entries
                if e.kind != "dir"
            ]
            # built with the old journal: the change is measured without kernel-owned files
            tree = lineage[publish.published_tree(lineage, head, files, journal)]
            assert isinstance(tree, pygit2.Tree)
            change = publish.change_between(lineage, head.tree, tree)
        except DecoderRejection as exc:
            rejection = {"message": str(exc), "path": exc.path}
        else:
            detail = change.detail or (note if change.status == "no-change" else None)
            entry = journal_entry(n, change.status, timestamp, detail=detail)
            tree_id = publish.with_journal(lineage, tree, _append(journal, entry))
            return _Result(
                change.status,
                outcome_text(change.status, change.detail),
                tree_id,
                subject_changed(n, change, note),
                len(files),
                sum(len(f.data) for f in files),
                None,
            )
    if rejection is not None:
        outcome = "decoder_rejection"
    elif result.wall_timeout:
        outcome = "wall_timeout"
    elif (accounting.oom_kills or 0) > 0 or accounting.result == "oom-kill":
        outcome = "cgroup_oom"
    elif result.signal is not None:
        outcome = "signal"
    else:
        outcome = "process_exit"
    entry = journal_entry(
        n, "died", timestamp, exit_status=result.exit_status,
        stderr_lines=lines,  # the entry keeps the last five and the Lisp error line
    )
    tree_id = publish.death_tree(lineage, head, _append(journal, entry))
    return _Result("died", outcome, tree_id, subject_died(n, result.exit_status), None, None,
                   rejection)


def _append(journal: bytes, entry: str) -> bytes:
    text = journal.decode("utf-8", "surrogateescape")
    return append_entry(text, entry).encode("utf-8", "surrogateescape")


def _observation(
    *,
    n: int,
    started_at: str,
    duration_ms: int,
    result: SandboxResult,
    outcome: _Result,
    commit: pygit2.Oid,
    model: ModelConfig,
    constraints: dict[str, Any],
    calls: list[dict[str, Any]],
    spend: Decimal,
    provenance: Provenance | None,
    cursor: int,
    ran_with: Mapping[str, Any] | None = None,
    refused: int = 0,
) -> dict[str, Any]:
    """The generation's observation record: the lineage contract's fields in the original's order,
    then ouro's additions (ceiling_backend, provenance, accounted_usd, rejection,
    replay_cursor: model calls answered 200 in this lineage through this generation,
    ran_with: the kernel, control plane and versions, as the control plane gave them;
    model_calls_refused: requests answered 429 past the model ceilings, not in model_calls;
    provider_failure and usage_exceeds_request: ``failures``' reading of the calls;
    seccomp_bpf_sha256: the filter's BPF, null for a life run without one; and, added
    by ``_run`` last, running_totals: ``totals``' record through this generation)."""
    accounting = result.accounting
    return {
        "schema": GENERATION_SCHEMA,
        "generation": n,
        "started_at": started_at,
        "duration_ms": duration_ms,
        "outcome": outcome.outcome,
        "exit_status": result.exit_status,
        "systemd_result": accounting.result,
        "cpu_usage_nsec": accounting.cpu_usage_nsec,
        "memory_peak_bytes": accounting.memory_peak_bytes,
        "oom_kills": accounting.oom_kills,
        "lineage_commit": str(commit),
        "result_archive_bytes": len(result.archive),
        "published_bytes": outcome.published_bytes,
        "published_files": outcome.published_files,
        "provider": model.provider,
        "model": model.name,
        "constraints": constraints,
        "model_calls": calls,
        "stderr_tail": "\n".join(_stderr_lines(result.stderr)[-OBSERVATION_TAIL_LINES:]),
        "ceiling_backend": result.backend,
        "provenance": dataclasses.asdict(provenance) if provenance is not None else None,
        "accounted_usd": str(spend),
        "rejection": outcome.rejection,
        "replay_cursor": cursor + _successes(calls),
        "ran_with": dict(ran_with) if ran_with is not None else None,
        "model_calls_refused": refused,
        "provider_failure": failures.provider_failure(calls),
        "usage_exceeds_request": failures.usage_exceeds_request(calls),
        # physics release 2: sha256 of the seccomp BPF the life ran under, as this host's
        # libseccomp exported it (the table and its digest are in constraints.sandbox)
        "seccomp_bpf_sha256": result.seccomp_bpf_sha256,
    }


def run_generation(
    *,
    paths: LineagePaths,
    identity: Identity,
    model: ModelConfig,
    ceilings: Ceilings,
    api_key: str | None,
    provenance: Provenance | None = None,
    cancel: threading.Event | None = None,
    kill_point: Callable[[str], None] | None = None,
    runtime: Runtime | None = None,
    ran_with: Mapping[str, Any] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> GenerationOutcome:
    """Run and publish one generation, or raise having published nothing.

    ``on_event(event)`` hears the broker's reports while the organism lives (a
    retry and its wait: ``broker``'s docstring), from another thread.

    ``PreflightError`` (``DriftError``, ``ProviderConfigError``, ``CeilingError``):
    refused before anything was written. ``RecoveryError``: leftovers of an
    earlier attempt must be recovered first. ``GenerationCancelled``: ``cancel``
    was set while the organism ran; the attempt was discarded (its spend recorded).
    Any other failure after the intent marker was written is settled by
    ``recovery.recover`` before it propagates. A host fault is named (``faults``): a full
    disk is a ``StorageError`` saying "no space left on device" and where, an object git
    cannot read a ``DamageError`` (a refusal), never a bare OSError or GitError.
    """
    try:
        return _generation(
            paths=paths, identity=identity, model=model, ceilings=ceilings, api_key=api_key,
            provenance=provenance, cancel=cancel, kill_point=kill_point, runtime=runtime,
            ran_with=ran_with,
            on_event=on_event,
        )
    except (OSError, pygit2.GitError) as exc:
        raise faults.translate(exc, paths, (recovery.kernel_temp_root(),)) from exc
    except KeyError as exc:  # pygit2: an object named by a tree or commit is missing
        if not faults.names_an_object(exc):
            raise
        raise faults.translate(pygit2.GitError(f"object {exc} not found"), paths) from exc


def _generation(
    *,
    paths: LineagePaths,
    identity: Identity,
    model: ModelConfig,
    ceilings: Ceilings,
    api_key: str | None,
    provenance: Provenance | None,
    cancel: threading.Event | None,
    kill_point: Callable[[str], None] | None,
    runtime: Runtime | None,
    ran_with: Mapping[str, Any] | None,
    on_event: Callable[[dict[str, Any]], None] | None,
) -> GenerationOutcome:
    """``run_generation`` itself, its host faults not yet named.

    Longer than 80 lines because it is the transaction's first half (preflight, the
    attempt's parts, the marker) written in the order it happens, with the one
    ``except`` that undoes everything before the marker exists.
    """
    clock = time.monotonic()
    started_at = _now()
    hook = kill_point or _env_kill_point
    runtime = runtime or real_runtime()
    if cancel is not None and cancel.is_set():
        raise GenerationCancelled(f"kernel: {paths.branch}: cancelled before it started")
    state = _inspect(paths, identity)
    publish.check_ref_locks(paths)  # DamageError: found before the sandbox, not after
    n = state.generation
    last = (recovery.read_observation(state.observations, state.obs_head, n - 1) or {}
            if n > 1 else {})
    cursor = _replay_cursor(state.observations, state.obs_head, n - 1, last)
    before = _totals_before(state.observations, state.obs_head, n - 1, last)
    _check_provider(model, api_key, n, cursor)
    constraints = constraints_manifest(ceilings, model)
    recovery.sweep_orphans(paths, None, min_age=recovery.ORPHAN_AGE_S)
    # The life's first process (put into its scope: a cgroup migration waits for an RCU
    # grace period) and the broker start first, each on its own thread, beside everything
    # below. Both are safe before the marker: the life waits at its scope's gate until the
    # sandbox runs, and nothing can ask the broker anything before then, which is after
    # the marker exists.
    stamp = datetime.now().astimezone().strftime("%Y%m%dT%H%M%S.%f%z")
    temp_prefix = recovery.KERNEL_DIR_PREFIX + recovery.scope_prefix(paths)
    temp_root = recovery.kernel_temp_root()
    parts = _Parts(
        kernel_dir=Path(tempfile.mkdtemp(prefix=temp_prefix, dir=temp_root)),
        broker_dir=Path(tempfile.mkdtemp(prefix=temp_prefix, dir=temp_root)),
        private_dir=Path(paths.git_dir) / publish.PRIVATE_DIR / f"{n:04d}-{stamp}",
    )
    try:
        with contextlib.suppress(Exception):  # empty cgroups of killed kernels, any lineage's
            runtime.reap_scopes("")  # (the real one sweeps once per apply: ceilings)
        scope_name = _scope_name(paths, n)
        parts.scope = runtime.open_scope(ceilings, scope_name)  # CeilingError
        if runtime.stage_sandbox is not None:  # its first process enters the scope meanwhile
            scope, parts.scope = parts.scope, None
            parts.scope = runtime.stage_sandbox(scope=scope, kernel_dir=parts.kernel_dir,
                                                ceilings=ceilings)
        _write_manifest(parts.kernel_dir, constraints)
        parts.door = Door(parts.kernel_dir)  # answers once the broker is up
        listener = {"on_event": on_event} if on_event is not None else {}
        parts.start_broker(runtime, model=model, constraints=constraints, api_key=api_key,
                           generation=n, replay_cursor=cursor, **listener)
        edited = _commit_external_edits(state.lineage, paths, state.head)
        head = edited or state.head
        if edited is not None:
            hook("after-external-edit")
        marker: dict[str, Any] = {
            "schema": publish.MARKER_SCHEMA,
            "generation": n,
            "lineage_head": str(head.id),
            "observation_head": str(state.obs_head.id),
            "phase": "running",
            "private_dir": str(parts.private_dir),
            "kernel_dir": str(parts.kernel_dir),
            "broker_dir": str(parts.broker_dir),
            "scope": scope_name,
            "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()),
            "started_at": started_at,
            "attempt": stamp,
        }
        publish.create_marker(paths, marker)
    except BaseException:  # no marker: nothing ran, no model was asked; undo and go
        parts.stop()
        for leftover in (parts.kernel_dir, parts.broker_dir, parts.private_dir):
            shutil.rmtree(leftover, ignore_errors=True)
        raise
    try:
        # From here on a crash is recovered through the marker.
        return _run(_Attempt(
            paths=paths, state=state, head=head, edited=edited, generation=n, cursor=cursor,
            totals_before=before, marker=marker, parts=parts, model=model, ceilings=ceilings,
            constraints=constraints, provenance=provenance, cancel=cancel, hook=hook,
            runtime=runtime, started_at=started_at, clock=clock, ran_with=ran_with,
        ))
    except BaseException as exc:
        parts.stop()
        try:
            recovery.recover(paths)
        except KernelError as recovery_error:
            exc.add_note(f"recovery after this failure also failed: {recovery_error}")
        raise


def _commit_external_edits(
    repo: pygit2.Repository, paths: LineagePaths, head: pygit2.Commit
) -> pygit2.Commit | None:
    """Commit whatever the worktree holds beyond ``head`` (every file: .gitignore has no say)."""
    tree = publish.worktree_tree(repo, Path(paths.worktree))
    if tree == head.tree.id:
        return None
    commit_id = publish.create_commit(repo, tree, head.id, EXTERNAL_EDIT_SUBJECT)
    publish.cas_ref(repo, paths.branch, head.id, commit_id, "ouro: external edit")
    commit = repo[commit_id]
    assert isinstance(commit, pygit2.Commit)
    publish.set_index(repo, commit.tree)
    return commit


@dataclass(frozen=True, eq=False)
class _Attempt:
    """One attempt at a generation once its intent marker exists: all that ``_run`` needs."""

    paths: LineagePaths
    state: _State
    head: pygit2.Commit  # H: the branch head the generation extends (after any external edit)
    edited: pygit2.Commit | None  # the `external edit` commit, if one was made
    generation: int
    cursor: int  # replay responses consumed by earlier generations
    totals_before: totals.RunningTotals  # the lineage's running totals before this one
    marker: dict[str, Any]  # as written in phase running
    parts: _Parts
    model: ModelConfig
    ceilings: Ceilings
    constraints: dict[str, Any]
    provenance: Provenance | None
    cancel: threading.Event | None
    hook: Callable[[str], None]
    runtime: Runtime
    started_at: str
    clock: float  # time.monotonic() when run_generation began
    ran_with: Mapping[str, Any] | None = None  # recorded as the observation's ``ran_with``


def _run(attempt: _Attempt) -> GenerationOutcome:
    """Steps 3-8 of the transaction (the module's docstring).

    Longer than 80 lines because the steps and their kill points read top to bottom
    in publication order, which is the crash-safety argument; split, the order would
    be harder to check against ``recovery``.
    """
    paths, state, head, n = attempt.paths, attempt.state, attempt.head, attempt.generation
    parts, runtime, hook, cancel = attempt.parts, attempt.runtime, attempt.hook, attempt.cancel
    ceilings = attempt.ceilings
    lineage, observations = state.lineage, state.observations
    journal = _blob(lineage, head.tree, JOURNAL_FILE)
    # the kernel dir is a throwaway: written, not made durable
    (parts.kernel_dir / JOURNAL_FILE).write_bytes(journal)
    (parts.kernel_dir / "input.tar").write_bytes(
        publish.input_archive(lineage, head.tree, head.commit_time))

    scope, parts.scope = parts.scope, None
    result = runtime.run_sandbox(
        kernel_dir=parts.kernel_dir, ceilings=ceilings, scope_name=_scope_name(paths, n),
        cancel=_Either(parts.abort, cancel), scope=scope,
    )
    hook("after-sandbox")
    # The organism is gone, so nobody can ask the broker anything: kill it (no graceful
    # wait) and take its audit, which is complete: a request it was still serving is on
    # record as pending with its worst case accounted.
    if parts.door is not None:
        parts.door.close()
        parts.door = None
    broker = parts.ready()  # the broker's own failure (the sandbox was stopped) raises here
    parts.broker = None
    broker.kill()
    calls = runtime.read_audit(parts.private_dir)
    from ..broker.door import read_refused

    refused = read_refused(parts.private_dir)
    spend = calls_spend(calls)
    if getattr(result, "cancelled", False) or (cancel is not None and cancel.is_set()):
        recovery.recover(paths)
        raise GenerationCancelled(
            f"kernel: generation {n} of {paths.branch} was cancelled; discarded (it re-runs), "
            f"its model spend ${spend} recorded"
        )

    failure = failures.provider_failure(calls)
    outcome = _classify(lineage, head, result, ceilings, runtime, n, journal, _now(),
                        failure["message"] if failure else None)
    commit_id = publish.create_commit(lineage, outcome.tree, head.id, outcome.subject)
    hook("after-lineage-object")
    publish.write_marker(paths, dict(attempt.marker, phase="publishing",
                                     lineage_commit=str(commit_id)))

    record = _observation(
        n=n, started_at=attempt.started_at,
        duration_ms=int((time.monotonic() - attempt.clock) * 1000), result=result,
        outcome=outcome, commit=commit_id, model=attempt.model, constraints=attempt.constraints,
        calls=calls, spend=spend, provenance=attempt.provenance, cursor=attempt.cursor,
        ran_with=attempt.ran_with,
        refused=refused,
    )
    # physics release 4: the lineage's totals through this generation, this one included
    record[totals.TOTALS_KEY] = totals.to_json(totals.advance(attempt.totals_before, record))
    data = (json.dumps(record, indent=2, default=str) + "\n").encode("utf-8")
    obs_path = observation_path(n)
    obs_commit = publish.commit_observation_files(
        observations, paths.observation_branch, state.obs_head, {obs_path: data},
        observation_subject(n, outcome.outcome),
    )
    hook("after-observation-commit")
    publish.checkout_paths(observations, obs_commit, [obs_path])

    publish.cas_ref(lineage, paths.branch, head.id, commit_id, f"ouro: gen {n}")
    hook("after-branch-move")
    commit = lineage[commit_id]
    assert isinstance(commit, pygit2.Commit)
    written: list[str] = []

    def progress(path: str) -> None:
        written.append(path)
        if len(written) == 1:
            hook("mid-worktree-write")

    publish.checkout_worktree(lineage, commit, progress)
    hook("before-marker-removal")
    publish.remove_marker(paths)
    for leftover in (parts.kernel_dir, parts.broker_dir, parts.private_dir):
        shutil.rmtree(leftover, ignore_errors=True)
    return GenerationOutcome(
        generation=n,
        status=outcome.status,
        outcome=outcome.outcome,
        lineage_commit=str(commit_id),
        observation_commit=str(obs_commit.id),
        accounted_usd=spend,
        duration_ms=int((time.monotonic() - attempt.clock) * 1000),
        exit_status=result.exit_status,
        external_edit=str(attempt.edited.id) if attempt.edited is not None else None,
        provider_failure=failure,
        usage_exceeds_request=bool(record["usage_exceeds_request"]),
    )


def _blob(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> bytes:
    data = _blob_bytes(repo, tree, path)
    return data if data is not None else b""

