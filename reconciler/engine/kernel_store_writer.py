"""Writing the kernel store: the running kernel, kernels materialized from git, fetches.

Rule: every write is atomic and leaves only read-only, verified entries. An
entry is built in ``<store>/.tmp-*`` (files 0444, folders 0555), then renamed
to ``<store>/<fingerprint>``; a commit record is written beside, then linked
into ``<store>/commits/<commit>`` (never replaced: the first record stands).
What is read back is verified by ``reconciler.state.kernel_store`` before use.
The layout and its names live there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from reconciler import __version__
from reconciler.errors import KernelStoreError
from reconciler.kernel.base import identity as kernel_identity
from reconciler.kernel.base.config import (
    ENTRY_REQUEST_SCHEMA,
    Ceilings,
    Identity,
    LineagePaths,
    ModelConfig,
    Provenance,
)
from reconciler.ownfiles import check_private, private_folder
from reconciler.plan.kernel_choice import KernelChoice
from reconciler.state import kernel_store
from reconciler.state.kernel_store import KernelStore, StoredKernel

if TYPE_CHECKING:
    from reconciler.engine.pinned import PinnedKernel
    from reconciler.kernel.transaction.generation import GenerationOutcome
    from reconciler.spec.load import LoadedSpec
    from reconciler.state.forks import ForkSource
    from reconciler.state.observe import Observed

__all__ = [
    "CONFIG_FILES",
    "ENTRY_FILES",
    "KERNEL_PACKAGES",
    "LineageKernel",
    "StoreRow",
    "default_store",
    "entry_schema_of",
    "facts_for",
    "fetch",
    "host_versions",
    "list_store",
    "materialize",
    "prepare",
    "prune",
    "put",
    "record_commit",
    "remove_entry",
    "run_record",
    "store_running",
    "warm",
    "warm_host_versions",
]

# The kernel's Python dependencies, whose versions every observation records.
KERNEL_PACKAGES = ("pygit2", "httpx", "httpcore", "tenacity")

# A kernel with these files has ouro's entry point (``python -m <package>``).
ENTRY_FILES = ("__main__.py", "entry.py")
# Where a kernel declares ENTRY_REQUEST_SCHEMA: v2 (sub-packages), then v1 (flat).
CONFIG_FILES = ("base/config.py", "config.py")
_SCHEMA_LINE = re.compile(rb'^ENTRY_REQUEST_SCHEMA = "([^"\n]+)"$', re.MULTILINE)


def _unwritable(store: KernelStore, exc: OSError) -> KernelStoreError:
    return KernelStoreError(
        f"ouro: cannot write the kernel store {store.root} ({exc.strerror or exc}): every "
        "kernel keeps an exact copy of itself there before it births or extends a lineage, "
        f"so that no upgrade loses its physics; make {store.root} writable, or set "
        f"{kernel_store.STORE_ENV} to a writable folder (on a shared filesystem, shared by "
        "everyone who runs these lineages)"
    )


def entry_schema_of(files: Mapping[str, bytes]) -> str | None:
    """The entry-point request schema a kernel speaks, read from its files (None: none)."""
    if not all(name in files for name in ENTRY_FILES):
        return None
    for name in CONFIG_FILES:
        found = _SCHEMA_LINE.search(files.get(name, b""))
        if found:
            return found.group(1).decode("ascii", "replace")
    return None


def _write_file(path: Path, data: bytes) -> None:
    with path.open("xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(path, 0o444)


def _make_writable(path: Path) -> None:
    for root, dirs, _ in os.walk(path):
        os.chmod(root, 0o755)
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, name), 0o755)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        _make_writable(path)
    shutil.rmtree(path, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _is_flat(files: Mapping[str, bytes]) -> bool:
    """A kernel of one folder (every kernel before physics release 2): stored as v1."""
    return all("/" not in name for name in files)


def _compile(package_dir: Path, final_dir: Path, sources: Sequence[str]) -> dict[str, str]:
    """Byte code for this interpreter, written with the entry (which is read-only after):
    checked-hash pycs in each source's folder's ``__pycache__``, used only for the exact
    source bytes, each listed with its sha256 (by its path in the package; a v1 entry by
    its name) so that the entry's verification covers them too."""
    import py_compile  # only to store a kernel: a plan imports this module too

    listed: dict[str, str] = {}
    flat = all("/" not in name for name in sources)
    for name in sorted(n for n in sources if n.endswith(".py")):
        source = package_dir / name
        folder = source.parent / kernel_store.BYTECODE_DIR
        folder.mkdir(exist_ok=True)
        target = folder / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
        py_compile.compile(str(source), cfile=str(target), dfile=str(final_dir / name),
                           doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        os.chmod(target, 0o444)
        relative = target.relative_to(package_dir).as_posix()
        key = target.name if flat else relative
        listed[key] = hashlib.sha256(target.read_bytes()).hexdigest()
    return listed


def _seal(top: Path) -> None:
    """fsync and make read-only every folder of a built entry, deepest first."""
    for root, _, _ in sorted(os.walk(top), key=lambda item: -len(Path(item[0]).parts)):
        _fsync_dir(Path(root))
        os.chmod(root, 0o555)


def _build(store: KernelStore, files: Mapping[str, bytes], commit: str,
           fingerprint: str) -> Path:
    """A complete, read-only entry in a temporary folder of the store: a flat kernel as a v1
    entry (an older ouro sharing the store reads it too), a tree as a v2 entry."""
    temp = Path(tempfile.mkdtemp(prefix=kernel_store.TEMP_PREFIX, dir=store.root))
    try:
        package = kernel_store.package_name(fingerprint)
        (temp / package).mkdir()
        for name in sorted(files):
            (temp / package / name).parent.mkdir(parents=True, exist_ok=True)
            _write_file(temp / package / name, files[name])
        bytecode = _compile(temp / package, store.entry_path(fingerprint) / package,
                            sorted(files))
        record = {
            "schema": (kernel_store.ENTRY_SCHEMA_V1 if _is_flat(files)
                       else kernel_store.ENTRY_SCHEMA),
            "fingerprint": fingerprint,
            "commit": commit,
            "package": package,
            "entry": entry_schema_of(files),
            "files": sorted(files),
            "size": sum(len(data) for data in files.values()),
            "bytecode": bytecode,
            "stored_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        text = json.dumps(record, indent=2) + "\n"
        _write_file(temp / kernel_store.ENTRY_FILE, text.encode("utf-8"))
        _seal(temp)
    except BaseException:
        _remove(temp)
        raise
    return temp


def record_commit(store: KernelStore, commit: str, fingerprint: str) -> None:
    """Record that ``commit``'s kernel is ``fingerprint`` (first record stands)."""
    if not kernel_identity.is_object_id(commit) or store.commit_fingerprint(commit):
        return
    folder = store.root / kernel_store.COMMITS_DIR
    try:
        private_folder(folder, "the kernel store")
        handle, name = tempfile.mkstemp(prefix=kernel_store.TEMP_PREFIX, dir=folder)
        temp = Path(name)
        try:
            with os.fdopen(handle, "w", encoding="ascii") as out:  # the file made O_EXCL
                out.write(fingerprint + "\n")
            os.chmod(temp, 0o444)
            with contextlib.suppress(FileExistsError):
                os.link(temp, folder / commit)
        finally:
            temp.unlink(missing_ok=True)
    except OSError as exc:
        raise _unwritable(store, exc) from exc


def put(store: KernelStore, files: Mapping[str, bytes], commit: str) -> StoredKernel:
    """Put a kernel (``{file name: bytes}``) into the store, atomically; the verified entry."""
    import py_compile

    fingerprint = kernel_identity.fingerprint_of(files)
    existing = store.get(fingerprint)  # KernelStoreError if damaged: never papered over
    if existing is None:
        try:
            private_folder(store.root, "the kernel store")
            temp = _build(store, files, commit, fingerprint)
        except OSError as exc:
            raise _unwritable(store, exc) from exc
        except py_compile.PyCompileError as exc:  # a kernel that does not compile is no kernel
            raise KernelStoreError(f"ouro: commit {commit}'s kernel does not compile: "
                                   f"{exc.msg}") from exc
        try:
            os.rename(temp, store.entry_path(fingerprint))
        except OSError as exc:
            _remove(temp)
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):  # else: another one won
                raise _unwritable(store, exc) from exc
        _fsync_dir(store.root)
    record_commit(store, commit, fingerprint)
    if existing is not None:  # verified just now: no second read of every file
        return existing
    entry = store.get(fingerprint)
    if entry is None:
        raise KernelStoreError(f"ouro: kernel store entry {store.entry_path(fingerprint)} "
                               "vanished while it was written")
    return entry


_STORED_RUNNING: dict[tuple[Path, str, str], StoredKernel] = {}
_STORED_RUNNING_MUTEX = threading.Lock()


def store_running(store: KernelStore, identity: Identity) -> StoredKernel:
    """Put this ouro's own kernel into the store (before it births or extends a lineage).
    Once per process, store and identity: a fleet's every lineage asks, and reading,
    hashing and verifying the kernel's files again for each cost ~0.1 s of CPU apiece.
    (The running kernel runs from ouro's own package, never from this entry.)"""
    key = (store.root, identity.fingerprint, identity.commit)
    with _STORED_RUNNING_MUTEX:
        known = _STORED_RUNNING.get(key)
        if known is None:
            known = _STORED_RUNNING[key] = _store_running(store, identity)
    return known


def _store_running(store: KernelStore, identity: Identity) -> StoredKernel:
    files = kernel_identity.read_trusted()
    if kernel_identity.fingerprint_of(files) != identity.fingerprint:
        raise KernelStoreError(
            f"ouro: this kernel's files changed while ouro ran (fingerprint "
            f"{identity.fingerprint[:12]}… at start): run it again")
    return put(store, files, identity.commit)


def _from_repository(store: KernelStore, repo: pygit2.Repository, commit: str,
                     where: str) -> StoredKernel:
    try:
        full = str(repo.revparse_single(commit).peel(pygit2.Commit).id)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise KernelStoreError(f"ouro: {where} has no commit {commit}") from exc
    files = kernel_store.kernel_tree_files(repo, full)
    if not files:
        raise KernelStoreError(
            f"ouro: commit {full} of {where} has no ouro kernel "
            f"({'/'.join(kernel_store.KERNEL_TREE)}): it is not an ouro commit")
    return put(store, files, full)


def materialize(store: KernelStore, commit: str) -> StoredKernel:
    """``commit``'s kernel from the local checkout's git objects, into the store."""
    where = kernel_store.checkout_repository()
    if where is None:
        raise KernelStoreError(f"ouro: no local git checkout to read commit {commit} from")
    return _from_repository(store, pygit2.Repository(str(where)), commit,
                            f"the checkout {where}")


def fetch(store: KernelStore, commit: str, source: str) -> StoredKernel:
    """``commit``'s kernel from a repository path, a bundle file or a URL, into the store."""
    path = Path(source).expanduser()
    if path.is_dir():
        found = pygit2.discover_repository(str(path))
        if not found:
            raise KernelStoreError(f"ouro: {path} is not a git repository")
        return _from_repository(store, pygit2.Repository(found), commit, str(path))
    try:
        private_folder(store.root, "the kernel store")
        scratch = Path(tempfile.mkdtemp(prefix=kernel_store.TEMP_PREFIX + "fetch-",
                                        dir=store.root))
    except OSError as exc:
        raise _unwritable(store, exc) from exc
    try:
        repo = pygit2.init_repository(str(scratch / "objects.git"), bare=True)
        if path.is_file():
            from reconciler.engine.bundle import is_bundle, read_bundle

            if not is_bundle(path):
                raise KernelStoreError(f"ouro: {path} is neither a git repository nor a bundle")
            read_bundle(path, repo)
        else:
            _fetch_url(repo, source)
        return _from_repository(store, repo, commit, source)
    finally:
        _remove(scratch)


def _fetch_url(repo: pygit2.Repository, url: str) -> None:
    remote = repo.remotes.create_anonymous(url)
    try:
        remote.fetch(["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"])
    except (pygit2.GitError, ValueError, OSError) as exc:
        raise KernelStoreError(f"ouro: cannot fetch from {url}: {exc}") from exc


def remove_entry(path: Path) -> None:
    """Remove one store entry (``ouro kernel prune``): made writable, then deleted."""
    mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        path.unlink()
        return
    _remove(path)


# ---------------------------------------------------------------- the kernel of a lineage


def facts_for(spec: LoadedSpec, observed: Observed, running: Identity,
              store: KernelStore, fork: ForkSource | None = None
              ) -> kernel_store.KernelFacts | None:
    """What the planner needs to choose this lineage's kernel (a fork to be born under its
    parent's kernel: that kernel's, from ``fork``, its source)."""
    if fork is not None and spec.fork is not None and spec.fork.kernel == "parent":
        from reconciler.engine.forks import fork_facts

        return fork_facts(spec, fork, running, store)
    return kernel_store.lineage_facts(
        spec.instrument_pin, observed.lineage_metadata, observed.any_exists, running,
        ENTRY_REQUEST_SCHEMA, store)


def _version_line(program: str, *args: str) -> str | None:
    path = shutil.which(program)
    if path is None:
        return None
    try:
        done = subprocess.run([path, *args], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    return lines[0] if lines else None


_VERSIONS_LOCK = threading.Lock()
_versions: list[Future[dict[str, str | None]]] = []  # at most one: this process's


def _host_versions_future() -> Future[dict[str, str | None]]:
    """The versions, read once per process on a thread of their own (``emacs --version``
    is tens of milliseconds): the first caller starts it, every caller shares its answer."""
    with _VERSIONS_LOCK:
        if not _versions:
            future: Future[dict[str, str | None]] = Future()

            def read() -> None:
                try:
                    future.set_result(_read_host_versions())
                except BaseException as error:  # handed to every caller of host_versions
                    future.set_exception(error)

            _versions.append(future)
            threading.Thread(target=read, name="ouro-host-versions", daemon=True).start()
        return _versions[0]


def warm_host_versions() -> None:
    """Start reading the versions now, beside what comes before they are needed."""
    _host_versions_future()


def host_versions() -> dict[str, str | None]:
    """Versions a generation runs with: Python, the kernel's packages, Emacs, bubblewrap."""
    return dict(_host_versions_future().result())


def _read_host_versions() -> dict[str, str | None]:
    import platform
    from importlib import metadata

    found: dict[str, str | None] = {"python": platform.python_version(),
                                    "libgit2": pygit2.LIBGIT2_VERSION}
    for package in KERNEL_PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    found["emacs"] = _version_line("emacs", "--version")
    found["bubblewrap"] = _version_line("bwrap", "--version")
    return found


def run_record(commit: str, fingerprint: str, source: str, running: Identity) -> dict[str, Any]:
    """The observation's ``ran_with``: the kernel, the control plane, the versions."""
    return {
        "kernel": {"commit": commit, "fingerprint": fingerprint, "source": source},
        "control_plane": {"ouro_version": __version__, "ouro_commit": running.commit},
        "versions": host_versions(),
    }


@dataclass(frozen=True)
class LineageKernel:
    """The kernel that births, recovers and extends one lineage: this ouro's own, in-process,
    or a pinned one from the store, through its entry point."""

    identity: Identity  # as the kernel is told it (the lineage's recorded one)
    source: str  # running | store | materialized
    pinned: PinnedKernel | None
    ran_with: dict[str, Any]

    def close(self) -> None:
        if self.pinned is not None:
            self.pinned.close()

    def birth(self, paths: LineagePaths) -> None:
        if self.pinned is not None:
            self.pinned.birth(paths, self.identity)
        else:
            from reconciler.kernel.transaction import lineage

            lineage.init_lineage(paths, self.identity)

    def recover(self, paths: LineagePaths) -> str:
        if self.pinned is not None:
            return self.pinned.recover(paths)
        from reconciler.kernel.transaction import recovery

        return str(recovery.recover(paths))

    def generation(self, *, paths: LineagePaths, model: ModelConfig, ceilings: Ceilings,
                   api_key: str | None, provenance: Provenance | None,
                   cancel: threading.Event | None,
                   on_event: Callable[[dict[str, Any]], None] | None = None
                   ) -> GenerationOutcome:
        """One generation; ``on_event`` hears the broker's reports (retries) when the kernel
        runs in this process (a pinned kernel's subprocess keeps them in its audit)."""
        if self.pinned is not None:
            return self.pinned.generation(
                paths=paths, identity=self.identity, model=model, ceilings=ceilings,
                api_key=api_key, provenance=provenance, cancel=cancel, ran_with=self.ran_with)
        from reconciler.kernel.transaction import generation

        return generation.run_generation(
            paths=paths, identity=self.identity, model=model, ceilings=ceilings,
            api_key=api_key, provenance=provenance, cancel=cancel, ran_with=self.ran_with,
            on_event=on_event)


def _recorded_identity(metadata: Mapping[str, Any] | None, commit: str, fingerprint: str,
                       running: Identity) -> Identity:
    meta = metadata or {}
    repository, ref = meta.get("instrument_repository"), meta.get("instrument_ref")
    return Identity(repository if isinstance(repository, str) else running.repository,
                    ref if isinstance(ref, str) else running.ref, commit, fingerprint)


def warm(choices: Sequence[KernelChoice | None]) -> None:
    """Start what the lineages about to run will wait for, beside what comes first (the
    apply's locks, observations, births): the host's versions (``emacs --version``), and
    the brokers' fork server when a lineage runs on this process's own kernel."""
    if not choices:
        return
    warm_host_versions()
    if any(choice is None or choice.source == "running" for choice in choices):
        from reconciler.kernel.broker import door

        door.warm()


def prepare(store: KernelStore, running: Identity, choice: KernelChoice | None,
            metadata: Mapping[str, Any] | None) -> LineageKernel:
    """Make the chosen kernel ready: this one stored, or the pinned one verified (and
    materialized from the checkout's objects first if it must be)."""
    if choice is None or choice.source == "running":
        warm([choice])  # (once per process: started already by an apply's plan)
        store_running(store, running)
        commit = choice.commit if choice is not None else running.commit
        if commit != running.commit:  # an identical kernel of another commit: known now
            record_commit(store, commit, running.fingerprint)
        identity = (_recorded_identity(metadata, commit, running.fingerprint, running)
                    if metadata else dataclasses.replace(running, commit=commit))
        return LineageKernel(identity, "running", None,
                             run_record(commit, running.fingerprint, "running", running))
    if choice.source is None:
        raise KernelStoreError(f"ouro: {choice.message}")
    entry = (store.get(choice.fingerprint) if choice.source == "store"
             else materialize(store, choice.commit))
    if entry is None:
        raise KernelStoreError(f"ouro: kernel {choice.fingerprint} left the store; apply again")
    if choice.fingerprint and entry.fingerprint != choice.fingerprint:
        raise KernelStoreError(
            f"ouro: commit {choice.commit}'s kernel fingerprints as {entry.fingerprint}, "
            f"not {choice.fingerprint}: it is not the kernel the lineage records")
    identity = (_recorded_identity(metadata, choice.commit, entry.fingerprint, running)
                if metadata else Identity(running.repository, running.ref, choice.commit,
                                          entry.fingerprint))
    from reconciler.engine.pinned import PinnedKernel

    return LineageKernel(identity, choice.source, PinnedKernel(store, entry, spare=True),
                         run_record(choice.commit, entry.fingerprint, choice.source, running))


def default_store(state_dir: Path | None = None) -> KernelStore:
    """The kernel store: ``OURO_KERNEL_STORE``, else ``<state dir>/.kernels``."""
    from reconciler.statedir import state_dir as resolve_state_dir

    root = kernel_store.store_root(resolve_state_dir(state_dir))
    check_private(root, "the kernel store")  # others could swap what the store runs
    return KernelStore(root)


# ---------------------------------------------------------------- ouro kernel list|fetch|prune


@dataclass(frozen=True)
class StoreRow:
    """One entry of the store, as ``ouro kernel list`` shows it."""

    fingerprint: str
    commits: tuple[str, ...]  # the commits recorded with this kernel
    lineages: tuple[str, ...]  # known lineages that need it
    size: int
    entry: str | None
    path: Path
    damaged: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "commits": list(self.commits),
                "lineages": list(self.lineages), "size": self.size, "entry": self.entry,
                "path": str(self.path), "damaged": self.damaged}


def list_store(store: KernelStore, needs: Mapping[str, Sequence[str]]) -> list[StoreRow]:
    """Every store entry (verified), with the commits and known lineages of each."""
    by_fingerprint: dict[str, list[str]] = {}
    for commit, fingerprint in store.commits().items():
        by_fingerprint.setdefault(fingerprint, []).append(commit)
    rows = []
    for fingerprint, entry in store.entries():
        commits = tuple(sorted(by_fingerprint.get(fingerprint, [])))
        lineages = tuple(sorted(needs.get(fingerprint, [])))
        if isinstance(entry, KernelStoreError):
            rows.append(StoreRow(fingerprint, commits, lineages, 0, None,
                                 store.entry_path(fingerprint), str(entry)))
        else:
            rows.append(StoreRow(fingerprint, commits or (entry.commit,), lineages, entry.size,
                                 entry.entry, entry.path))
    return rows


def prune(store: KernelStore, needs: Mapping[str, Sequence[str]], keep: str,
          dry_run: bool = False) -> list[StoreRow]:
    """Remove the entries no known lineage needs (never ``keep``: this ouro's own).
    Damaged entries are removed too (they are never run). Returns what was (or would be)
    removed."""
    removed = []
    for row in list_store(store, needs):
        if row.lineages or row.fingerprint == keep:
            continue
        if not dry_run:
            try:
                remove_entry(row.path)
            except OSError as exc:
                raise _unwritable(store, exc) from exc
        removed.append(row)
    return removed
