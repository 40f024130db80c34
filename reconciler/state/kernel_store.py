"""The kernel store, and what is known about each lineage's kernel. Read-only.

A kernel is named by the commit it came from and identified by its fingerprint
(``kernel.base.identity``: a sha256 over its trusted files). The store keeps an
exact copy of every kernel that births or extends a lineage, so that no upgrade
of ouro can lose the physics some lineage needs (``reconciler.engine.kernel_store_writer``
writes it; this module only reads). Layout (``KernelStore``)::

    <store>/<fingerprint>/entry.json            ENTRY_SCHEMA: fingerprint, commit, files, entry
    <store>/<fingerprint>/<package>/<path>...   the trusted files, byte for byte (read-only)
    <store>/commits/<commit>                    "<fingerprint>\\n": the kernel that commit has
    <store>/.tmp-*                              being written (renamed into place when whole)

Two entry layouts are read: ``ouro-kernel-store-entry/v1`` (a kernel from before
physics release 2: its files directly in ``<package>/``, named by file name,
fingerprint v1) and ``ouro-kernel-store-entry/v2`` (a kernel laid out in
sub-packages: ``files`` are relative POSIX paths into ``<package>/``,
fingerprint v2). A flat kernel is written as v1, so an older ouro sharing the
store reads it too; a kernel with sub-packages as v2. Byte code sits in each
folder's ``__pycache__``, every file of it listed with its sha256.

The store is ``OURO_KERNEL_STORE`` if set, else ``<state dir>/.kernels`` (beside
the lineages, so that a shared filesystem shares it). An entry is verified
against its fingerprint every time it is read, and it must hold exactly its
files: ``entry.json`` and the package folder, the package folder exactly the
recorded files and their byte code. Anything else (a file planted beside the
package or in it, a link, a folder not on a recorded file's way) makes it
damaged (``KernelStoreError``), never a kernel to run.

``gather`` collects, for one lineage, the facts the planner's pure choice
(``reconciler.plan.kernel_choice``) needs: the recorded kernel, the running one, the
store's entry, and whether the local checkout's git objects hold that commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import pygit2

from reconciler.errors import KernelStoreError
from reconciler.kernel.base import identity as kernel_identity
from reconciler.kernel.base.config import ENTRY_METADATA_KEY, Identity
from reconciler.ownfiles import read_regular

__all__ = [
    "BYTECODE_DIR",
    "COMMITS_DIR",
    "ENTRY_FILE",
    "ENTRY_SCHEMA",
    "ENTRY_SCHEMAS",
    "ENTRY_SCHEMA_V1",
    "KERNEL_TREE",
    "STORE_DIR_NAME",
    "STORE_ENV",
    "TEMP_PREFIX",
    "KernelFacts",
    "KernelStore",
    "StoredKernel",
    "checkout_repository",
    "gather",
    "gather_pin",
    "is_tree_layout",
    "kernel_tree_files",
    "lineage_facts",
    "package_name",
    "store_root",
]

STORE_ENV = "OURO_KERNEL_STORE"
STORE_DIR_NAME = ".kernels"
ENTRY_FILE = "entry.json"
ENTRY_SCHEMA_V1 = "ouro-kernel-store-entry/v1"  # a flat kernel (fingerprint v1)
ENTRY_SCHEMA = "ouro-kernel-store-entry/v2"  # a kernel in sub-packages (fingerprint v2)
ENTRY_SCHEMAS = (ENTRY_SCHEMA_V1, ENTRY_SCHEMA)
COMMITS_DIR = "commits"
TEMP_PREFIX = ".tmp-"
BYTECODE_DIR = kernel_identity.BYTECODE_DIR  # in each folder: listed in entry.json, verified
# Where an ouro commit keeps its kernel (the fingerprinted folder).
KERNEL_TREE = ("reconciler", "kernel")
# A kernel folder holding this (folder, file) is laid out in sub-packages (fingerprint v2).
V2_MARKER = ("base", "identity.py")
_FINGERPRINT = re.compile(r"\A[0-9a-f]{64}\Z")
_PACKAGE = re.compile(r"\Aouro_kernel_[0-9a-f]{16}\Z")


def package_name(fingerprint: str) -> str:
    """The import name of a stored kernel: any name works, this one never collides."""
    return f"ouro_kernel_{fingerprint[:16]}"


def store_root(state_dir: Path) -> Path:
    """``OURO_KERNEL_STORE``, else ``<state dir>/.kernels``."""
    configured = os.environ.get(STORE_ENV)
    base = Path(configured).expanduser() if configured else state_dir / STORE_DIR_NAME
    return Path(os.path.abspath(base))


@dataclass(frozen=True)
class StoredKernel:
    """One verified store entry."""

    fingerprint: str
    commit: str  # the commit it was stored from
    path: Path  # the entry's folder
    package: str  # its import name (a folder of ``path``)
    entry: str | None  # the entry-point request schema it speaks (None: it has none)
    files: tuple[str, ...]  # relative POSIX paths in the package folder
    size: int  # bytes of its trusted files
    schema: str = ENTRY_SCHEMA  # ENTRY_SCHEMA_V1: a flat kernel from before physics release 2

    @property
    def package_dir(self) -> Path:
        return self.path / self.package


def _damaged(path: Path, why: str) -> KernelStoreError:
    return KernelStoreError(f"ouro: kernel store entry {path} is damaged ({why}); it is never run")


def _walk_package(path: Path, package_dir: Path) -> tuple[dict[str, bytes], dict[str, bytes],
                                                            set[str]]:
    """Everything in a package folder: ({source path: bytes}, {byte-code path: bytes},
    {folder paths}), paths relative POSIX; a link or a special file damages the entry."""
    sources: dict[str, bytes] = {}
    bytecode: dict[str, bytes] = {}
    folders: set[str] = set()
    if not package_dir.is_dir() or package_dir.is_symlink():
        raise _damaged(path, "its package folder is missing")
    for root, dirs, names in os.walk(package_dir):
        for name in [*dirs, *names]:
            item = Path(root) / name
            relative = item.relative_to(package_dir).as_posix()
            mode = os.lstat(item).st_mode
            if stat.S_ISDIR(mode):
                folders.add(relative)
            elif not stat.S_ISREG(mode):
                raise _damaged(path, f"{relative} is neither a file nor a folder")
            elif Path(root).name == BYTECODE_DIR:
                bytecode[relative] = item.read_bytes()
            else:
                sources[relative] = item.read_bytes()
    return sources, bytecode, folders


def _check_exact(path: Path, files: list[str], sources: dict[str, bytes],
                 bytecode: dict[str, bytes], folders: set[str], listed: Any) -> None:
    """The package folder holds exactly the recorded files, the folders on their way
    and their recorded byte code: nothing else is ever imported from a store entry."""
    if sorted(sources) != sorted(files):
        extra = sorted(set(sources) - set(files))
        raise _damaged(path, "its files are not the ones recorded"
                       + (f" ({', '.join(extra[:3])} is not one of them)" if extra else ""))
    on_the_way = {str(PurePosixPath(name).parent) for name in files} - {"."}
    on_the_way |= {str(parent) for name in on_the_way for parent in PurePosixPath(name).parents
                   if str(parent) != "."}
    allowed = on_the_way | {f"{folder}/{BYTECODE_DIR}" for folder in on_the_way} | {BYTECODE_DIR}
    if folders - allowed:
        raise _damaged(path, f"folder {sorted(folders - allowed)[0]} is not one recorded")
    if not isinstance(listed, dict):
        raise _damaged(path, f"{ENTRY_FILE} lists no byte code")
    for name, data in bytecode.items():  # a missing one is only slower: the source compiles
        if listed.get(name) != hashlib.sha256(data).hexdigest():
            raise _damaged(path, f"byte code {name} is not the one recorded")


_MAX_ENTRY_BYTES = 16 << 20  # an entry lists a few hundred files' digests


def _record(path: Path, fingerprint: str) -> dict[str, Any]:
    try:
        data = read_regular(path / ENTRY_FILE, _MAX_ENTRY_BYTES)
        if data is None:
            raise OSError("not a regular file of at most "
                          f"{_MAX_ENTRY_BYTES} bytes (a link, a device, or too large)")
        record = json.loads(data)
    except (OSError, ValueError) as exc:
        raise _damaged(path, f"{ENTRY_FILE} unreadable: {exc}") from exc
    if not isinstance(record, dict) or record.get("schema") not in ENTRY_SCHEMAS:
        raise _damaged(path, f"{ENTRY_FILE} is of no schema this ouro reads "
                       f"({', '.join(ENTRY_SCHEMAS)})")
    package, commit, files = record.get("package"), record.get("commit"), record.get("files")
    entry = record.get("entry")
    v1 = record["schema"] == ENTRY_SCHEMA_V1
    trusted = kernel_identity.is_trusted_name if v1 else kernel_identity.is_trusted_path
    if (record.get("fingerprint") != fingerprint or not isinstance(package, str)
            or not _PACKAGE.match(package) or not isinstance(commit, str)
            or not kernel_identity.is_object_id(commit) or not isinstance(files, list)
            or not all(isinstance(f, str) and trusted(f) for f in files)
            or not (entry is None or isinstance(entry, str))):
        raise _damaged(path, f"{ENTRY_FILE} does not describe this entry")
    return record


def _read_entry(path: Path, fingerprint: str) -> StoredKernel:
    """Read and verify one entry; ``KernelStoreError`` if it is not exactly its fingerprint
    (its files, and nothing beside them)."""
    record = _record(path, fingerprint)
    package, files = record["package"], record["files"]
    listed = record.get("bytecode") or {}
    if record["schema"] == ENTRY_SCHEMA_V1 and isinstance(listed, dict):
        listed = {f"{BYTECODE_DIR}/{name}": digest for name, digest in listed.items()}
    try:
        beside = sorted(set(os.listdir(path)) - {ENTRY_FILE, package})
        if beside:
            raise _damaged(path, f"{beside[0]} lies beside its package")
        sources, bytecode, folders = _walk_package(path, path / package)
    except OSError as exc:
        raise _damaged(path, f"its files cannot be read: {exc}") from exc
    _check_exact(path, files, sources, bytecode, folders, listed)
    actual = kernel_identity.fingerprint_of(sources)
    if actual != fingerprint:
        raise _damaged(path, f"its files fingerprint as {actual[:12]}…, not {fingerprint[:12]}…")
    return StoredKernel(fingerprint, record["commit"], path, package, record.get("entry"),
                        tuple(sorted(files)), sum(len(data) for data in sources.values()),
                        record["schema"])


class KernelStore:
    """A store of kernels at ``root`` (which need not exist yet)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.abspath(root))

    def entry_path(self, fingerprint: str) -> Path:
        return self.root / fingerprint

    def get(self, fingerprint: str) -> StoredKernel | None:
        """The verified entry for ``fingerprint``; None if absent; ``KernelStoreError`` if
        damaged."""
        if not _FINGERPRINT.match(fingerprint):
            return None
        path = self.entry_path(fingerprint)
        if not os.path.lexists(path):
            return None
        return _read_entry(path, fingerprint)

    def commit_fingerprint(self, commit: str) -> str | None:
        """The fingerprint recorded for ``commit``'s kernel, if the store knows it."""
        if not kernel_identity.is_object_id(commit):
            return None
        try:
            text = (read_regular(self.root / COMMITS_DIR / commit, 4096) or b""
                    ).decode("ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if _FINGERPRINT.match(text) else None

    def commits(self) -> dict[str, str]:
        """Every commit record: {commit: fingerprint}."""
        found: dict[str, str] = {}
        try:
            names = sorted(os.listdir(self.root / COMMITS_DIR))
        except OSError:
            return found
        for name in names:
            value = self.commit_fingerprint(name)
            if value is not None:
                found[name] = value
        return found

    def resolve_commit(self, prefix: str) -> str | None:
        """A full commit id the store knows that starts with ``prefix`` (unique), else None."""
        matches = [c for c in self.commits() if c.startswith(prefix.lower())]
        return matches[0] if len(matches) == 1 else None

    def fingerprints(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root) if _FINGERPRINT.match(n))
        except OSError:
            return []

    def entries(self) -> Iterator[tuple[str, StoredKernel | KernelStoreError]]:
        """Every entry, verified: (fingerprint, entry or the error that damages it)."""
        for fingerprint in self.fingerprints():
            try:
                entry = self.get(fingerprint)
            except KernelStoreError as error:
                yield fingerprint, error
                continue
            if entry is not None:
                yield fingerprint, entry


# ---------------------------------------------------------------- git objects


@cache
def checkout_repository() -> Path | None:
    """The git repository this ouro's own package lives in (None for an installed wheel)."""
    try:
        found = pygit2.discover_repository(str(Path(__file__).resolve().parent))
    except pygit2.GitError:
        return None
    return Path(found) if found else None


def _blobs(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str, deep: bool,
           files: dict[str, bytes]) -> None:
    """The trusted blobs of ``tree`` (its sub-trees too when ``deep``) into ``files``."""
    for item in tree:
        relative = prefix + (item.name or "")
        if item.type_str == "tree" and deep and item.name != kernel_identity.BYTECODE_DIR:
            sub = repo[item.id]
            assert isinstance(sub, pygit2.Tree)
            _blobs(repo, sub, relative + "/", deep, files)
        elif (item.type_str == "blob" and item.filemode != pygit2.enums.FileMode.LINK
                and kernel_identity.is_trusted_path(relative)):
            blob = repo[item.id]
            assert isinstance(blob, pygit2.Blob)
            files[relative] = blob.data


def is_tree_layout(tree: pygit2.Tree) -> bool:
    """Is this kernel folder laid out in sub-packages (fingerprint v2)? A v2 kernel keeps
    its identity in ``base/identity.py``; every kernel before it was one flat folder."""
    try:
        base = tree[V2_MARKER[0]]
        return base.type_str == "tree" and V2_MARKER[1] in base  # type: ignore[operator]
    except KeyError:
        return False


def kernel_tree_files(repo: pygit2.Repository, commit: str) -> dict[str, bytes] | None:
    """The trusted files of ``commit``'s kernel, by the layout that commit has: a v1 kernel's
    files directly in its folder (by name), a v2 kernel's whole tree (by relative path).
    None if the commit is not in ``repo``; ``{}`` for a commit without a kernel folder
    (it is not an ouro commit).
    """
    try:
        found = repo.get(commit)
        if found is None:
            return None
        target = found.peel(pygit2.Commit)
    except (ValueError, pygit2.GitError, KeyError):
        return None
    node: Any = target.tree
    try:
        for part in KERNEL_TREE:
            node = repo[node[part].id]
    except KeyError:
        return {}
    if not isinstance(node, pygit2.Tree):
        return {}
    files: dict[str, bytes] = {}
    _blobs(repo, node, "", is_tree_layout(node), files)
    return files


def _checkout_fingerprint(commit: str) -> str | None:
    """``commit``'s kernel fingerprint from the local checkout's objects ("" if it has none)."""
    where = checkout_repository()
    if where is None:
        return None
    try:
        files = kernel_tree_files(pygit2.Repository(str(where)), commit)
    except pygit2.GitError:
        return None
    if files is None:
        return None
    return kernel_identity.fingerprint_of(files) if files else ""


# ---------------------------------------------------------------- facts for the planner


@dataclass(frozen=True)
class KernelFacts:
    """What is known about one lineage's kernel (``reconciler.plan.kernel_choice`` decides)."""

    commit: str  # recorded (or pinned) commit; "" if unknown
    fingerprint: str  # recorded fingerprint; "" if unknown (a pin not resolved yet)
    entry: str | None  # the entry-point schema recorded at birth (None: born before it)
    repository: str  # where the commit can be fetched from
    metadata: dict[str, Any]  # the lineage's root metadata ({} for a birth)
    running: Identity
    running_entry: str
    store: Path
    commit_fingerprint: str | None  # the commit's kernel fingerprint if known ("" no kernel)
    commit_known_from: str | None  # "store" | "checkout"
    stored: StoredKernel | None
    damaged: str | None  # the store's entry for the fingerprint fails verification
    for_birth: bool = False


def _commit_facts(store: KernelStore, commit: str) -> tuple[str | None, str | None]:
    recorded = store.commit_fingerprint(commit)
    if recorded is not None:
        return recorded, "store"
    from_git = _checkout_fingerprint(commit)
    if from_git is not None:
        return from_git, "checkout"
    return None, None


def _stored(store: KernelStore, fingerprint: str) -> tuple[StoredKernel | None, str | None]:
    try:
        return store.get(fingerprint), None
    except KernelStoreError as error:
        return None, str(error)


def gather(metadata: dict[str, Any] | None, running: Identity, running_entry: str,
           store: KernelStore) -> KernelFacts | None:
    """Facts about the kernel a lineage with this root ``metadata`` needs (None: no metadata)."""
    if not metadata:
        return None
    commit = metadata.get("instrument_commit")
    fingerprint = metadata.get("instrument_fingerprint")
    entry = metadata.get(ENTRY_METADATA_KEY)
    repository = metadata.get("instrument_repository")
    commit = commit.lower() if isinstance(commit, str) else ""
    fingerprint = fingerprint.lower() if isinstance(fingerprint, str) else ""
    known: str | None = None
    source: str | None = None
    if commit == running.commit:  # that commit's kernel is this one
        known, source = running.fingerprint, "running"
    elif kernel_identity.is_object_id(commit):
        known, source = _commit_facts(store, commit)
    stored, damaged = (None, None)
    if fingerprint and fingerprint != running.fingerprint:
        stored, damaged = _stored(store, fingerprint)
    return KernelFacts(
        commit=commit, fingerprint=fingerprint,
        entry=entry if isinstance(entry, str) else None,
        repository=repository if isinstance(repository, str) else running.repository,
        metadata=dict(metadata), running=running, running_entry=running_entry, store=store.root,
        commit_fingerprint=known, commit_known_from=source, stored=stored, damaged=damaged,
    )


def _resolve_pin(store: KernelStore, pin: str, running: Identity) -> str:
    """A pinned (maybe abbreviated) commit as a full id, from the store or the checkout."""
    wanted = pin.strip().lower()
    if kernel_identity.is_object_id(wanted):
        return wanted
    if len(wanted) >= 7 and running.commit.startswith(wanted):
        return running.commit
    known = store.resolve_commit(wanted) if len(wanted) >= 7 else None
    if known is not None:
        return known
    where = checkout_repository()
    if where is not None and len(wanted) >= 7:
        try:
            found = pygit2.Repository(str(where)).revparse_single(wanted)
            return str(found.peel(pygit2.Commit).id)
        except (KeyError, ValueError, pygit2.GitError):
            pass
    return wanted


def gather_pin(pin: str, running: Identity, running_entry: str,
               store: KernelStore) -> KernelFacts:
    """Facts about the kernel a spec's ``instrument.commit`` pin asks new lineages to be born
    under."""
    commit = _resolve_pin(store, pin, running)
    known: str | None
    source: str | None
    if commit == running.commit:
        known, source = running.fingerprint, "running"
    elif kernel_identity.is_object_id(commit):
        known, source = _commit_facts(store, commit)
    else:
        known, source = None, None
    stored, damaged = (None, None)
    if known and known != running.fingerprint:
        stored, damaged = _stored(store, known)
    return KernelFacts(
        commit=commit, fingerprint=known or "", entry=running_entry if known else None,
        repository=running.repository, metadata={}, running=running,
        running_entry=running_entry,
        store=store.root, commit_fingerprint=known, commit_known_from=source,
        stored=stored, damaged=damaged, for_birth=True,
    )


def lineage_facts(pin: str | None, metadata: dict[str, Any] | None, exists: bool,
                  running: Identity, running_entry: str,
                  store: KernelStore) -> KernelFacts | None:
    """The kernel facts the planner needs for one lineage: of its recorded kernel if it
    exists, of the kernel its spec pins if it is to be born (None: this ouro's own)."""
    if exists:
        return gather(metadata, running, running_entry, store)
    if pin:
        return gather_pin(pin, running, running_entry, store)
    return None
