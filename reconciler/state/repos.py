"""The one reader of a lineage's two repositories (the lineage's git dir, its observations).

Rule: read-only, pygit2 only, and every state reader goes through here: opening
either repository, a branch's head, a first-parent walk, the JSON of a file in a
tree, an observation by number and the root's metadata. One set of libgit2 and
decoding failures (``READ_ERRORS``) is caught here and said in the codebase's
terms: ``Unreadable`` (a ``StateError``: something is there but does not read as
it should, run ``ouro verify``), or ``None`` for what is simply absent.

``refs_from_files`` reads a git dir's HEAD and branch refs from their files, only where
that is exactly what libgit2 would read (a plain git dir, loose refs of plain names, no
packed-refs to consult; anything else: None, and libgit2 is asked): an in-sync lineage
whose refs have not moved is then observed without opening its repositories.

A branch's head is handed out only once what its newest commit added reads whole
(``state.audit_objects.unreadable_newest``; else ``NewestUnreadable``): a host crash
during the last generation can leave a loose object truncated, and libgit2 1.9 loops
forever on one. ``Repo.head`` does that check (once per head of an opened repository),
so no reader has to thread it in itself.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pygit2

from reconciler.errors import StateError
from reconciler.kernel.base import formats
from reconciler.kernel.base.config import METADATA_FILE, LineagePaths
from reconciler.ownfiles import read_regular
from reconciler.state.audit_objects import damage_message, unreadable_newest

__all__ = [
    "READ_ERRORS",
    "Absent",
    "Lineage",
    "NewestUnreadable",
    "Repo",
    "Unreadable",
    "first_line",
    "observation_name",
    "open_repo",
    "refs_from_files",
]

# What reading a damaged repository can raise: this reader's own (a StateError), and
# from libgit2 (GitError, and KeyError for a missing object), the file system or decoding
# what was read. A caller that reads pygit2 objects it was handed catches exactly these.
READ_ERRORS: tuple[type[BaseException], ...] = (
    StateError, pygit2.GitError, KeyError, ValueError, OSError, TypeError, IndexError,
    AttributeError, UnicodeDecodeError, struct.error)

_FLAGS = pygit2.enums.RepositoryOpenFlag


class Unreadable(StateError):
    """Something in a lineage's repositories is there but does not read (run ``ouro verify``)."""


class Absent(StateError):
    """The file asked for is not in the tree."""


class NewestUnreadable(Unreadable):
    """An object a branch's newest commit added does not read whole: nothing of that
    repository may be read through libgit2 (it could loop forever)."""


def observation_name(number: int) -> str:
    """Observation ``number``'s file name inside ``generations/`` (``formats.observation_path``)."""
    return formats.observation_path(number).split("/", 1)[1]


def first_line(commit: pygit2.Commit) -> str:
    """A commit's first line."""
    return str(commit.message).split("\n", 1)[0]


def open_repo(path: os.PathLike[str] | str, *, bare: bool = False) -> Repo | None:
    """The repository at exactly ``path`` (no search upwards), or None when nothing there
    opens as one. ``bare`` ignores core.worktree: a git dir whose worktree is gone opens."""
    if not os.path.lexists(path):
        return None
    flags = _FLAGS.NO_SEARCH | (_FLAGS.BARE if bare else _FLAGS(0))
    try:
        return Repo(pygit2.Repository(os.fspath(path), flags), Path(path))
    except READ_ERRORS:
        return None


_PLAIN_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_REF_BYTES = 4096


@functools.lru_cache(maxsize=4096)
def _plain_branch(name: str) -> bool:
    """A branch name whose ref file is ``refs/heads/<name>`` beyond doubt (git's and
    libgit2's rules could refuse or read anything else otherwise)."""
    return ".." not in name and all(
        _PLAIN_PART.fullmatch(part) and not part.endswith((".lock", "."))
        for part in name.split("/"))


def _small_file(path: str) -> bytes | None:
    """A ref file's bytes; None when there is none. Anything else there (a link, a FIFO, a
    folder, a file past the bound) raises OSError: libgit2 is asked instead."""
    data = read_regular(path, _REF_BYTES)
    if data is None and os.path.lexists(path):
        raise OSError(errno.EINVAL, "not a small regular file", path)
    return data


_OID_LINE = re.compile(rb"[0-9a-f]{40}\n")


def _oid_line(data: bytes) -> str | None:
    """The commit id of a ref file that holds exactly one (SHA-1, lower case, newline)."""
    return data[:40].decode("ascii") if _OID_LINE.fullmatch(data) else None


def refs_from_files(git_dir: str, branches: tuple[str, ...]
                    ) -> tuple[str | None, tuple[str | None, ...]] | None:
    """The branch ``git_dir``'s HEAD names (None: detached) and each of ``branches``'
    commit id (None: no such branch), read from the ref files; None when the files cannot
    say it beyond doubt (then ask libgit2: ``Repo.head_branch``, ``Repo.head_id``).

    Beyond doubt means: a git dir of its own (``objects/`` there, no ``commondir``), a
    HEAD that is a plain symbolic ref or a commit id, plain branch names whose ref files
    hold a commit id, and no ``packed-refs`` when a ref file is absent. A link is never
    followed to a ref (``O_NOFOLLOW``: libgit2 is asked instead)."""
    # (paths joined by hand: os.path.join's checks cost more than the rest here, and
    # ``git_dir`` is a string, the names plain)
    try:
        if os.path.lexists(f"{git_dir}/commondir") or not (
                os.path.isdir(f"{git_dir}/objects") and os.path.isdir(f"{git_dir}/refs")):
            return None
        head = _small_file(f"{git_dir}/HEAD")
        if head is None:
            return None
        head_branch: str | None = None
        if head.startswith(b"ref: refs/heads/") and head.endswith(b"\n"):
            head_branch = head[16:-1].decode("utf-8")
            if not _plain_branch(head_branch):
                return None
        elif _oid_line(head) is None:
            return None
        found: list[str | None] = []
        for branch in branches:
            if not _plain_branch(branch):
                return None
            data = _small_file(f"{git_dir}/refs/heads/{branch}")
            if data is None:
                if os.path.lexists(f"{git_dir}/packed-refs"):
                    return None
                found.append(None)
                continue
            oid = _oid_line(data)
            if oid is None:
                return None
            found.append(oid)
        return head_branch, tuple(found)
    except (OSError, UnicodeDecodeError):
        return None


class Repo:
    """One opened repository: ``raw`` is the pygit2 object, ``place`` where it lives."""

    def __init__(self, raw: pygit2.Repository, place: Path) -> None:
        self.raw = raw
        self.place = place
        self._whole: dict[str, str] = {}  # branch -> the head found whole

    def head_branch(self) -> str | None:
        """The branch HEAD names (None: detached, or unreadable)."""
        try:
            target = self.raw.lookup_reference("HEAD").target
        except READ_ERRORS:
            return None
        if isinstance(target, str) and target.startswith("refs/heads/"):
            return target.removeprefix("refs/heads/")
        return None

    def head_id(self, branch: str) -> pygit2.Oid | None:
        """The branch's commit id from its ref alone (no object is read); None if absent."""
        try:
            target = self.raw.lookup_reference(f"refs/heads/{branch}").resolve().target
        except READ_ERRORS:  # InvalidSpecError is a ValueError
            return None
        return target if isinstance(target, pygit2.Oid) else None

    def head(self, branch: str, *, whole: str | None = None) -> pygit2.Commit | None:
        """The branch's commit, once what its newest commit added reads whole (else
        ``NewestUnreadable``, naming the object and the remedy); None if absent.
        ``whole``: a head the caller found whole moments ago (not checked again)."""
        target = self.head_id(branch)
        return self._whole_commit(branch, target, whole) if target is not None else None

    def head_commit(self) -> pygit2.Commit | None:
        """The commit HEAD names, on a branch or detached (checked as ``head``); None if none."""
        branch = self.head_branch()
        if branch is not None:
            return self.head(branch)
        try:
            target = self.raw.lookup_reference("HEAD").resolve().target
        except READ_ERRORS:
            return None
        return self._whole_commit("HEAD", target, None) if isinstance(
            target, pygit2.Oid) else None

    def _whole_commit(self, branch: str, target: pygit2.Oid,
                      whole: str | None) -> pygit2.Commit | None:
        if str(target) not in (self._whole.get(branch), whole):
            bad = unreadable_newest(self.raw, target)
            if bad:
                raise NewestUnreadable(damage_message(self.place, branch, bad[0]))
        self._whole[branch] = str(target)
        return self.commit(target)

    def commit(self, oid: pygit2.Oid | str) -> pygit2.Commit | None:
        """The commit ``oid`` (None: absent, or not a commit)."""
        try:
            found = self.raw.get(oid)
        except READ_ERRORS as error:
            raise Unreadable(f"{self.place}: commit {oid}: {error}") from error
        return found if isinstance(found, pygit2.Commit) else None

    def first_parents(self, start: pygit2.Commit) -> Iterator[pygit2.Commit]:
        """``start`` and its first parents, newest first (libgit2's first-parent walk)."""
        walker = self.raw.walk(start.id, pygit2.enums.SortMode.NONE)
        walker.simplify_first_parent()
        try:
            yield from walker
        except READ_ERRORS as error:
            raise Unreadable(f"{self.place}: the history below {start.id} does not read: "
                             f"{error}") from error

    def root(self, start: pygit2.Commit) -> pygit2.Commit:
        """The root of ``start``'s first-parent line. O(history)."""
        root = start
        for commit in self.first_parents(start):
            root = commit
        return root

    def tree(self, tree: pygit2.Tree, name: str) -> pygit2.Tree | None:
        """The folder ``name`` of ``tree`` (None: absent, or not a folder)."""
        try:
            found = self.raw.get(tree[name].id) if name in tree else None
        except READ_ERRORS as error:
            raise Unreadable(f"{self.place}: {name}/ does not read: {error}") from error
        return found if isinstance(found, pygit2.Tree) else None

    def json_of(self, oid: pygit2.Oid, what: str, *, limit: int | None = None) -> Any:
        """A blob's parsed JSON, read once through the object database (looking it up as
        an object and then reading its data would inflate a loose object twice). A blob
        over ``limit`` bytes is ``Unreadable`` without being read."""
        try:
            if limit is not None and self.raw.odb.read_header(oid)[1] > limit:
                raise ValueError(f"over {limit} bytes")
            kind, data = self.raw.odb.read(oid)
            if kind != pygit2.enums.ObjectType.BLOB:
                raise ValueError("not a file")
            return json.loads(data)  # UTF-8 bytes: json decodes them
        except READ_ERRORS as error:
            raise Unreadable(f"{self.place}: {what} is unreadable: {error}") from error

    def json(self, tree: pygit2.Tree, path: str) -> Any:
        """The parsed JSON of the file ``path`` in ``tree``: ``Absent`` when there is no such
        file, ``Unreadable`` when it is not a file or not JSON."""
        try:
            entry = tree[path]
        except KeyError:
            raise Absent(f"{self.place}: no {path}") from None
        except READ_ERRORS as error:
            raise Unreadable(f"{self.place}: {path} does not read: {error}") from error
        return self.json_of(entry.id, path)

    def json_or_none(self, tree: pygit2.Tree, path: str) -> Any:
        """As ``json``, but None for a file that is absent or unreadable."""
        try:
            return self.json(tree, path)
        except StateError:
            return None


class Lineage:
    """Both repositories of one lineage, each opened on first use."""

    def __init__(self, paths: LineagePaths) -> None:
        self.paths = paths

    def at(self, paths: LineagePaths) -> Lineage:
        """This lineage's repositories, as opened so far, read on ``paths``' branches
        (a new reader when ``paths`` names other places)."""
        if (paths.worktree, paths.git_dir, paths.observations) != (
                self.paths.worktree, self.paths.git_dir, self.paths.observations):
            return Lineage(paths)
        moved = Lineage(paths)
        moved.__dict__.update({name: value for name, value in self.__dict__.items()
                               if name in ("lineage", "observations",
                                           "_observations_git_dir")})
        return moved

    @functools.cached_property
    def lineage(self) -> Repo | None:
        """The lineage's git dir, opened bare (its worktree may be gone)."""
        return open_repo(self.paths.git_dir, bare=True)

    @functools.cached_property
    def observations(self) -> Repo | None:
        return open_repo(self.paths.observations)

    def git_dir(self, which: str) -> str | None:
        """The git dir of the lineage (``which``: "lineage") or of its observations
        ("observations": its ``.git`` folder; None when that is not a folder)."""
        if which == "lineage":
            return os.fspath(self.paths.git_dir)
        return self._observations_git_dir

    @functools.cached_property
    def _observations_git_dir(self) -> str | None:
        dotgit = os.path.join(self.paths.observations, ".git")
        return dotgit if os.path.isdir(dotgit) else None

    def refs(self, which: str, branches: tuple[str, ...]
             ) -> tuple[str | None, tuple[str | None, ...]]:
        """The branch HEAD names and each branch's commit id in the lineage's git dir
        (``which``: "lineage") or its observations': from the ref files when they say it
        beyond doubt (``refs_from_files``), else through libgit2 (opening it)."""
        git_dir = self.git_dir(which)
        fast = refs_from_files(git_dir, branches) if git_dir is not None else None
        if fast is not None:
            return fast
        repo = self.lineage if which == "lineage" else self.observations
        if repo is None:
            return None, tuple(None for _ in branches)
        ids = tuple(str(found) if (found := repo.head_id(branch)) is not None else None
                    for branch in branches)
        return repo.head_branch(), ids

    def config_stamp(self, which: str) -> str | None:
        """What the git dir is now (its owner; its config file's size, time and inode),
        None if either is absent: a record read while the repository opened is believed
        only while this is unchanged (libgit2 reads the config and checks the owner)."""
        git_dir = self.git_dir(which)
        if git_dir is None:
            return None
        try:
            owner = os.stat(git_dir).st_uid  # (libgit2 refuses a git dir of another owner)
            info = os.stat(os.path.join(git_dir, "config"))
        except OSError:
            return None
        return f"{owner}:{info.st_size}:{info.st_mtime_ns}:{info.st_ino}"

    def lineage_head(self) -> pygit2.Commit | None:
        repo = self.lineage
        return repo.head(self.paths.branch) if repo is not None else None

    def observation_head(self) -> pygit2.Commit | None:
        repo = self.observations
        return repo.head(self.paths.observation_branch) if repo is not None else None

    def observation(self, number: int) -> dict[str, Any] | None:
        """Observation ``number`` on the observation branch (None: absent or unreadable)."""
        repo, head = self.observations, self.observation_head()
        if repo is None or head is None or number < 1:
            return None
        try:
            found = repo.json(head.tree, formats.observation_path(number))
        except StateError:
            return None
        return found if isinstance(found, dict) else None

    def root_metadata(self) -> tuple[str | None, dict[str, Any]]:
        """The lineage branch's root commit (first parents from its head) and its metadata
        file's object ({}: absent or unreadable); (None, {}) when there is no root."""
        repo, head = self.lineage, self.lineage_head()
        if repo is None or head is None:
            return None, {}
        root = repo.root(head)
        found = repo.json_or_none(root.tree, METADATA_FILE)
        return str(root.id), found if isinstance(found, dict) else {}
