"""The git side of one generation: trees, commits, compare-and-swap refs, the marker.

Trusted harness; never mounted into a generation. All git access is pygit2.
Nothing here decides anything about a generation; ``generation`` and
``recovery`` compose these steps into the transaction.

Compare-and-swap: ``cas_ref`` locks the ref through a libgit2 reference
transaction (the same ``refs/heads/<name>.lock`` file git itself takes, created
with O_EXCL), reads the ref's current value while holding that lock, and only
then writes the new target; a value other than the expected one (or a lock
held by someone else) is a ``ConcurrentChangeError`` and nothing is written.
Any writer that honours git's ref locks -- git, libgit2, another ouro -- can
therefore never be overwritten.

Trees are built from explicit entries (never from the index or .gitignore
rules), so every file is "force-added": nothing the organism or a human
writes can be hidden from the history.

Durability, deliberately bounded: the intent marker is fsynced (file and
directory); git objects and refs are written with libgit2's defaults (no
fsync). The transaction is safe against the kernel process dying at any
instant (SIGKILL, OOM, a crash); a machine losing power mid-write is left to
the filesystem, as it is for git itself with its defaults.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pygit2
from pygit2.enums import CheckoutStrategy, DiffOption

from ..base.config import JOURNAL_FILE, KERNEL_OWNED_NAMES, ORGANISM_FILE, LineagePaths
from ..base.errors import (
    ConcurrentChangeError,
    DamageError,
    DecoderRejection,
    PreflightError,
    RecoveryError,
)
from ..base.formats import MARKER_FILE, MARKER_SCHEMA, Change
from ..base.gitnames import refused
from .worktree import FileEntry, read_worktree, write_worktree

__all__ = [
    "MARKER_FILE",
    "MARKER_SCHEMA",
    "PRIVATE_DIR",
    "FileEntry",
    "atomic_write",
    "branch_head",
    "build_tree",
    "cas_ref",
    "change_between",
    "check_ref_locks",
    "checkout_paths",
    "checkout_tree",
    "checkout_worktree",
    "commit_observation_files",
    "create_blob",
    "create_commit",
    "create_marker",
    "death_tree",
    "input_archive",
    "marker_path",
    "open_lineage",
    "open_observations",
    "published_tree",
    "read_marker",
    "ref_locks",
    "remove_marker",
    "restore_source",
    "restored_organism",
    "set_index",
    "signature",
    "with_journal",
    "worktree_tree",
    "write_marker",
]

T = TypeVar("T")
PRIVATE_DIR = "ouro-private"  # under the git dir: broker HOME/TMPDIR and audit, never mounted

FILE = pygit2.GIT_FILEMODE_BLOB
EXECUTABLE = pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
LINK = pygit2.GIT_FILEMODE_LINK
TREE = pygit2.GIT_FILEMODE_TREE
_NAME = "ouroboros"
_EMAIL = "ouroboros@localhost"


def signature() -> pygit2.Signature:
    """The kernel's git identity, stamped now (a module-level Signature would freeze its time)."""
    return pygit2.Signature(_NAME, _EMAIL)


# ---------------------------------------------------------------- opening


def open_lineage(paths: LineagePaths) -> pygit2.Repository:
    """The lineage repository, whose worktree must be ``paths.worktree``."""
    git_dir, worktree = Path(paths.git_dir).resolve(), Path(paths.worktree).resolve()
    # The git dir names its worktree (core.worktree), or the worktree's .git file names
    # the git dir (a plain `git clone --separate-git-dir`); either way both must agree.
    for place in (git_dir, worktree):
        try:
            repo = pygit2.Repository(str(place))
        except (pygit2.GitError, OSError):
            continue
        if (
            repo.workdir
            and Path(repo.workdir).resolve() == worktree
            and Path(repo.path).resolve() == git_dir
        ):
            return repo
    raise PreflightError(
        f"kernel: {paths.git_dir} and {paths.worktree} are not one lineage's git dir and "
        "worktree: the lineage's places do not belong together"
    )


def open_observations(paths: LineagePaths) -> pygit2.Repository:
    try:
        repo = pygit2.Repository(str(paths.observations))
    except (pygit2.GitError, OSError) as exc:
        raise PreflightError(
            f"kernel: {paths.observations} is not an observation repository: {exc}"
        ) from exc
    if repo.is_bare or not repo.workdir:
        raise PreflightError(f"kernel: {paths.observations} has no worktree")
    return repo


def branch_head(repo: pygit2.Repository, branch: str) -> pygit2.Commit | None:
    ref = repo.references.get(f"refs/heads/{branch}")
    if ref is None:
        return None
    commit = repo.get(ref.target)
    return commit if isinstance(commit, pygit2.Commit) else None


# ---------------------------------------------------------------- compare-and-swap


class _RefLocked(Exception):
    """Someone else holds ``<ref>.lock`` (a git command, a gc): worth waiting a moment for."""


LOCK_PATIENCE_S = 5.0  # how long a held ref lock is waited for before giving up


def ref_locks(paths: LineagePaths) -> list[Path]:
    """The ``refs/heads/<branch>.lock`` files of the lineage's two branches present now."""
    places = ((Path(paths.git_dir), paths.branch),
              (Path(paths.observations) / ".git", paths.observation_branch))
    return [lock for git_dir, branch in places
            if os.path.lexists(lock := git_dir / "refs" / "heads" / f"{branch}.lock")]


def check_ref_locks(paths: LineagePaths) -> None:
    """Before a generation runs: a branch lock that stays held for ``LOCK_PATIENCE_S`` was
    left behind by a git process that died; refuse now (``DamageError``), not after the
    organism ran and its observation was committed."""
    # tenacity only where a lock is waited for: plan and status read ``ref_locks``
    # through this module and never retry (physics release 4)
    from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

    retrying = Retrying(
        retry=retry_if_exception_type(_RefLocked), stop=stop_after_delay(LOCK_PATIENCE_S),
        wait=wait_exponential(multiplier=0.02, max=0.5), reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                if ref_locks(paths):
                    raise _RefLocked()
    except _RefLocked:
        held = ", ".join(str(lock) for lock in ref_locks(paths))
        raise DamageError(
            f"kernel: {held or 'a branch lock'} stayed held for {LOCK_PATIENCE_S:g}s: a git "
            "command that died left it behind; if no git command is running on this lineage, "
            "remove it, then run apply again (nothing ran)",
            reason="damaged",
        ) from None


def cas_ref(
    repo: pygit2.Repository, branch: str, expected: pygit2.Oid, new: pygit2.Oid, message: str
) -> None:
    """Move ``refs/heads/<branch>`` from ``expected`` to ``new``, or raise and write nothing.

    A ref lock held by another process is waited for (bounded, with backoff); a ref
    that moved is never waited for: that is a conflict, not a delay.
    """
    from tenacity import (
        Retrying,
        retry_if_exception_type,
        stop_after_delay,
        wait_exponential,
        wait_random,
    )

    retrying = Retrying(
        retry=retry_if_exception_type(_RefLocked),
        stop=stop_after_delay(LOCK_PATIENCE_S),
        wait=wait_exponential(multiplier=0.02, max=0.5) + wait_random(0, 0.02),
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                _cas_once(repo, branch, expected, new, message)
    except _RefLocked as exc:
        raise ConcurrentChangeError(
            f"kernel: cannot lock refs/heads/{branch} in {repo.path} ({exc.__cause__}): another "
            f"writer held it for {LOCK_PATIENCE_S:g}s; nothing was written"
        ) from exc.__cause__


def _cas_once(
    repo: pygit2.Repository, branch: str, expected: pygit2.Oid, new: pygit2.Oid, message: str
) -> None:
    refname = f"refs/heads/{branch}"
    try:
        with repo.transaction() as txn:
            try:
                txn.lock_ref(refname)
            except pygit2.GitError as exc:
                raise _RefLocked(str(exc)) from exc
            ref = repo.references.get(refname)
            current = ref.target if ref is not None else None
            if current != expected:
                raise ConcurrentChangeError(
                    f"kernel: {refname} in {repo.path} moved behind ouro's back "
                    f"(expected {expected}, found {current}); nothing was overwritten: "
                    "find out who changed it, then run recovery"
                )
            txn.set_target(refname, new, None, message)
    except pygit2.GitError as exc:
        raise ConcurrentChangeError(
            f"kernel: cannot update {refname} in {repo.path} ({exc}); nothing was written"
        ) from exc


# ---------------------------------------------------------------- trees


def _check_path(path: str) -> list[str]:
    """Defense in depth behind the decoder: a relative path with no way out of the tree."""
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or any(p in ("", ".", "..") or refused(p) or "\0" in p for p in parts)
    ):
        raise DecoderRejection(f"kernel: refusing to publish path {path!r}", path=path)
    return parts


def create_blob(repo: pygit2.Repository, data: bytes) -> pygit2.Oid:
    """``repo.create_blob``, with a full disk named as one: libgit2 reports a loose object
    it could not write for lack of space with a stale message ("object not found"), and
    removes its temporary file, so the space is back by the time anyone looks. A failed
    write of more bytes than the objects folder has free is that folder's ENOSPC."""
    try:
        oid: pygit2.Oid = repo.create_blob(data)
    except pygit2.GitError as exc:
        objects = Path(repo.path) / "objects"
        try:
            info = os.statvfs(objects)
        except OSError:
            raise exc from None
        if info.f_bavail * info.f_frsize <= len(data) + (1 << 20):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(objects)) from exc
        raise
    return oid


Node = dict[str, "Node | tuple[pygit2.Oid, int]"]


def _insert(root: Node, parts: list[str], value: Node | tuple[pygit2.Oid, int], path: str) -> None:
    node = root
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise DecoderRejection(f"kernel: {path!r} runs through a file", path=path)
        node = child
    leaf = parts[-1]
    if leaf in node:
        if isinstance(value, dict) and isinstance(node[leaf], dict):
            return
        raise DecoderRejection(f"kernel: {path!r} appears twice", path=path)
    node[leaf] = value


def _write_tree(repo: pygit2.Repository, node: Node) -> pygit2.Oid | None:
    """Write a nested node bottom-up; empty directories vanish (git has none). Iterative:
    each directory is written once all its subdirectories are (depth is the tree's)."""
    written: dict[int, pygit2.Oid | None] = {}
    pending: list[tuple[Node, bool]] = [(node, False)]
    while pending:
        current, children_done = pending.pop()
        if not children_done:
            pending.append((current, True))
            pending.extend((child, False) for child in current.values() if isinstance(child, dict))
            continue
        builder = repo.TreeBuilder()
        count = 0
        for name in sorted(current):
            value = current[name]
            if isinstance(value, dict):
                oid = written[id(value)]
                if oid is None:
                    continue
                builder.insert(name, oid, TREE)
            else:
                builder.insert(name, value[0], value[1])
            count += 1
        written[id(current)] = builder.write() if count else None
    return written[id(node)]


def build_tree(
    repo: pygit2.Repository,
    entries: Iterable[FileEntry],
    *,
    kept: dict[str, tuple[pygit2.Oid, int]] | None = None,
) -> pygit2.Oid:
    """A tree of ``entries`` plus ``kept`` top-level objects (kernel-owned files)."""
    root: Node = {}
    for entry in entries:
        parts = _check_path(entry.path)
        if len(parts) == 1 and parts[0] in KERNEL_OWNED_NAMES:
            raise DecoderRejection(f"kernel: {entry.path!r} is kernel-owned", path=entry.path)
        mode = LINK if entry.kind == "symlink" else (EXECUTABLE if entry.executable else FILE)
        _insert(root, parts, (create_blob(repo, entry.data), mode), entry.path)
    for name, value in (kept or {}).items():
        _insert(root, [name], value, name)
    oid = _write_tree(repo, root)
    if oid is None:
        oid = repo.TreeBuilder().write()
    return oid


def worktree_tree(repo: pygit2.Repository, worktree: Path) -> pygit2.Oid:
    """The worktree as it is now, every file included whatever .gitignore says."""
    root: Node = {}
    try:
        for entry in read_worktree(worktree):
            mode = LINK if entry.kind == "symlink" else (EXECUTABLE if entry.executable else FILE)
            _insert(root, entry.path.split("/"), (create_blob(repo, entry.data), mode), entry.path)
    except OSError as exc:
        raise PreflightError(f"kernel: cannot read the worktree {worktree}: {exc}") from exc
    except DecoderRejection as exc:  # duplicate names cannot happen on a filesystem
        raise PreflightError(f"kernel: {exc}") from exc
    oid = _write_tree(repo, root)
    return oid if oid is not None else repo.TreeBuilder().write()


def _blob_entries(
    repo: pygit2.Repository, tree: pygit2.Tree
) -> Iterator[tuple[str, pygit2.Object, int]]:
    """Every entry below ``tree`` in tree order, a folder before its contents; iterative."""
    pending: list[tuple[str, Iterator[pygit2.Object]]] = [("", iter(tree))]
    while pending:
        prefix, items = pending[-1]
        item = next(items, None)
        if item is None:
            pending.pop()
            continue
        path = prefix + (item.name or "")
        if item.filemode == TREE:
            yield path + "/", item, TREE
            sub = repo[item.id]
            assert isinstance(sub, pygit2.Tree)
            pending.append((path + "/", iter(sub)))
        elif item.filemode in (FILE, EXECUTABLE, LINK):
            yield path, item, item.filemode
        # gitlinks (submodules) carry no content of this tree: skipped


def input_archive(repo: pygit2.Repository, tree: pygit2.Tree, mtime: int) -> bytes:
    """A tar of the committed tree minus the kernel-owned top-level names."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, item, mode in _blob_entries(repo, tree):
            if path.split("/", 1)[0] in KERNEL_OWNED_NAMES:
                continue
            info = tarfile.TarInfo(path.rstrip("/"))
            info.mtime = mtime
            if mode == TREE:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                continue
            blob = repo[item.id]
            assert isinstance(blob, pygit2.Blob)
            data = blob.data
            if mode == LINK:
                info.type = tarfile.SYMTYPE
                info.linkname = data.decode("utf-8", "surrogateescape")
                info.mode = 0o777
                tar.addfile(info)
            else:
                info.size = len(data)
                info.mode = 0o755 if mode == EXECUTABLE else 0o644
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _kernel_owned(tree: pygit2.Tree) -> dict[str, tuple[pygit2.Oid, int]]:
    return {
        item.name: (item.id, item.filemode)
        for item in tree
        if item.name in KERNEL_OWNED_NAMES and item.name != ".git"
    }


def published_tree(
    repo: pygit2.Repository, head: pygit2.Commit, entries: Iterable[FileEntry], journal: bytes
) -> pygit2.Oid:
    """The organism's result, with the kernel-owned files of ``head`` and the new journal."""
    kept = _kernel_owned(head.tree)
    kept[JOURNAL_FILE] = (create_blob(repo, journal), FILE)
    return build_tree(repo, entries, kept=kept)


def with_journal(repo: pygit2.Repository, tree: pygit2.Tree, journal: bytes) -> pygit2.Oid:
    """``tree`` with journal.md replaced."""
    builder = repo.TreeBuilder(tree)
    builder.insert(JOURNAL_FILE, create_blob(repo, journal), FILE)
    oid: pygit2.Oid = builder.write()
    return oid


def restore_source(current: T | None, ancestors: Iterable[T | None]) -> int | None:
    """The restore rule: which body organism.el gets when a generation dies.

    ``current`` is the body (blob id) of the commit the death extends, None when it
    has no organism.el; ``ancestors`` are those of its first-parent ancestors, newest
    first (None where there is none). The nearest ancestor whose organism.el exists
    and differs from ``current`` gives the body: its index is returned. None: there
    is no such ancestor, and the body stays as it is (a missing organism.el stays
    missing). So [A, no organism.el, A] keeps A. The kernel publishes deaths by it
    (``restored_organism``) and the audit checks them by it.
    """
    for index, body in enumerate(ancestors):
        if body is not None and body != current:
            return index
    return None


def restored_organism(
    repo: pygit2.Repository, head: pygit2.Commit
) -> tuple[pygit2.Oid, int] | None:
    """organism.el (id, mode) a death on top of ``head`` restores (``restore_source``),
    or None when head's body stays."""
    current = head.tree[ORGANISM_FILE].id if ORGANISM_FILE in head.tree else None
    seen: list[pygit2.Object | None] = []

    def ancestors() -> Iterator[pygit2.Oid | None]:
        commit = head
        while commit.parents:
            commit = commit.parents[0]
            try:
                item: pygit2.Object | None = commit.tree[ORGANISM_FILE]
            except KeyError:
                item = None
            seen.append(item)
            yield item.id if item is not None else None

    index = restore_source(current, ancestors())
    if index is None:
        return None
    item = seen[index]
    assert item is not None
    return item.id, item.filemode


def death_tree(repo: pygit2.Repository, head: pygit2.Commit, journal: bytes) -> pygit2.Oid:
    """Head's tree, organism.el restored, the new journal: nothing of the organism's kept."""
    builder = repo.TreeBuilder(head.tree)
    restored = restored_organism(repo, head)
    if restored is not None:
        builder.insert(ORGANISM_FILE, restored[0], restored[1])
    builder.insert(JOURNAL_FILE, create_blob(repo, journal), FILE)
    oid: pygit2.Oid = builder.write()
    return oid


def change_between(repo: pygit2.Repository, old: pygit2.Tree, new: pygit2.Tree) -> Change:
    """Paths changed (kernel-owned files excepted) and organism.el's line stats.

    A path counts once however it changed (content, mode, type); no rename
    detection, so a rename changes two paths. organism.el counts as changed
    only when its bytes changed, so its stats are never +0/-0.
    """
    diff = old.diff_to_tree(new)
    paths: set[str] = set()
    for delta in diff.deltas:
        path = delta.new_file.path or delta.old_file.path
        if path.split("/", 1)[0] in KERNEL_OWNED_NAMES:
            continue
        paths.add(path)
    added = deleted = 0
    if ORGANISM_FILE in paths:
        before = old[ORGANISM_FILE].id if ORGANISM_FILE in old else None
        after = new[ORGANISM_FILE].id if ORGANISM_FILE in new else None
        if before != after:
            patch = pygit2.Patch.create_from(
                _blob(repo, before), _blob(repo, after), flag=DiffOption.FORCE_TEXT
            )
            _, added, deleted = patch.line_stats
    return Change(added, deleted, added + deleted > 0, len(paths))


def _blob(repo: pygit2.Repository, oid: pygit2.Oid | None) -> pygit2.Blob | None:
    if oid is None:
        return None
    blob = repo[oid]
    return blob if isinstance(blob, pygit2.Blob) else None


def create_commit(
    repo: pygit2.Repository, tree: pygit2.Oid, parent: pygit2.Oid, subject: str
) -> pygit2.Oid:
    """A commit object with the kernel's identity, on no branch."""
    author = signature()
    oid: pygit2.Oid = repo.create_commit(None, author, author, subject + "\n", tree, [parent])
    return oid


# ---------------------------------------------------------------- worktrees


def checkout_worktree(
    repo: pygit2.Repository, commit: pygit2.Commit, progress: Callable[[str], None] | None = None
) -> None:
    """Make the worktree and index exactly ``commit``, byte for byte (``worktree``):
    untracked and ignored files go too; attributes, filters and config have no say."""
    workdir = Path(str(repo.workdir).rstrip("/"))
    try:
        write_worktree(repo, workdir, commit.tree, progress)
    except (pygit2.GitError, OSError) as exc:
        raise RecoveryError(
            f"kernel: rewriting the worktree {workdir} to {commit.id} failed ({exc}); "
            "run recovery"
        ) from exc


def checkout_paths(repo: pygit2.Repository, commit: pygit2.Commit, paths: list[str]) -> None:
    """Bring ``paths`` of the worktree and index to ``commit`` (the observation repo)."""
    if paths:
        checkout_tree(repo, commit.tree, CheckoutStrategy.FORCE, paths=paths)


def set_index(repo: pygit2.Repository, tree: pygit2.Tree) -> None:
    """The index is ``tree``: a checkout that found a file already right leaves a stale
    entry (e.g. after a crash mid-rewrite), and git would then show a phantom change."""
    index = repo.index
    index.read_tree(tree)
    index.write()


def checkout_tree(
    repo: pygit2.Repository, tree: pygit2.Tree, strategy: CheckoutStrategy, **options: Any
) -> None:
    """pygit2's checkout_tree, typed."""
    repo.checkout_tree(tree, strategy=strategy, **options)  # type: ignore[no-untyped-call]


def commit_observation_files(
    repo: pygit2.Repository,
    branch: str,
    expected: pygit2.Commit,
    files: dict[str, bytes],
    subject: str,
) -> pygit2.Commit:
    """Commit ``files`` (``dir/name`` paths) onto the observation branch, CAS from ``expected``."""
    builders: dict[str, pygit2.TreeBuilder] = {}
    root = repo.TreeBuilder(expected.tree)
    for path, data in files.items():
        directory, _, name = path.rpartition("/")
        if not directory or "/" in directory:
            raise ValueError(f"observation path {path!r} must be dir/name")
        if directory not in builders:
            try:
                subtree = repo[expected.tree[directory].id]
            except KeyError:
                subtree = None
            builders[directory] = (
                repo.TreeBuilder(subtree) if isinstance(subtree, pygit2.Tree)
                else repo.TreeBuilder()
            )
        builders[directory].insert(name, create_blob(repo, data), FILE)
    for directory, builder in builders.items():
        root.insert(directory, builder.write(), TREE)
    commit_id = create_commit(repo, root.write(), expected.id, subject)
    cas_ref(repo, branch, expected.id, commit_id, f"ouro: {subject}")
    commit = repo[commit_id]
    assert isinstance(commit, pygit2.Commit)
    return commit


# ---------------------------------------------------------------- the intent marker


def atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename, fsync the directory."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def marker_path(paths: LineagePaths) -> Path:
    return Path(paths.git_dir) / MARKER_FILE


def create_marker(paths: LineagePaths, marker: dict[str, Any]) -> None:
    """Write the intent marker only if there is none: one generation per lineage at a time,
    even without the reconciler's lock (link(2) does not replace an existing name)."""
    path = marker_path(paths)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write((json.dumps(marker, indent=2) + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, path)
        except FileExistsError as exc:
            raise ConcurrentChangeError(
                f"kernel: {path} appeared meanwhile: another generation of this lineage is "
                "running; nothing of this one ran"
            ) from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    _fsync_dir(path.parent)


def write_marker(paths: LineagePaths, marker: dict[str, Any]) -> None:
    """Replace the (own) intent marker atomically."""
    atomic_write(marker_path(paths), (json.dumps(marker, indent=2) + "\n").encode("utf-8"))


def read_marker(paths: LineagePaths) -> tuple[bool, dict[str, Any] | None]:
    """(present, content); content None when present but unreadable or of another schema."""
    try:
        text = marker_path(paths).read_bytes()
    except FileNotFoundError:
        return False, None
    except OSError:
        return True, None
    try:
        value = json.loads(text)
    except ValueError:
        return True, None
    if not isinstance(value, dict) or value.get("schema") != MARKER_SCHEMA:
        return True, None
    return True, value


def remove_marker(paths: LineagePaths) -> None:
    try:
        os.unlink(marker_path(paths))
    except FileNotFoundError:
        return
    _fsync_dir(marker_path(paths).parent)
