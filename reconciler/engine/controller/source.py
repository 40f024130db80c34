"""The spec repository: fetched with pygit2 into a cache clone, one revision checked out.

Rule: no git subprocess. REPO is a local path (a bare or non-bare repository) or a URL
libgit2 can fetch (file://, https://, ssh://). The cache is a clone under the state
dir's ``.controller/`` that may be deleted at any time: the next fetch makes it again.
A candidate revision is exported into a folder of its own to be validated, so that a
bad commit never replaces the checkout of the last good one (``adopt`` does, once the
candidate validated); the checkout is a real git work tree whose HEAD is the revision,
so every generation records the spec commit (``reconciler.spec.provenance``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pygit2

from reconciler.errors import OuroError
from reconciler.ownfiles import private_folder

__all__ = ["SourceError", "SpecSource"]

_REMOTE = "origin"


class SourceError(OuroError):
    """The spec repository cannot be fetched or read: the controller keeps reconciling the
    last good revision and says what to fix (the URL, the branch, credentials)."""


@dataclass(frozen=True)
class Revision:
    commit: str
    folder: Path  # the checked-out tree's root


def _url(repo: str) -> str:
    """A local path made absolute (libgit2 fetches from a path as from a URL)."""
    if "://" in repo or (":" in repo and not repo.startswith(("/", "."))):
        return repo
    return str(Path(repo).expanduser().resolve())


class SpecSource:
    """One spec repository's branch, cached in ``cache`` (a folder of the state dir)."""

    def __init__(self, repo: str, branch: str, cache: Path) -> None:
        self.url = _url(repo)
        self.branch = branch
        self.cache = cache
        self._repo: pygit2.Repository | None = None

    @property
    def clone_dir(self) -> Path:
        return self.cache / "specs"

    @property
    def candidate_dir(self) -> Path:
        return self.cache / "candidate"

    def _open(self) -> pygit2.Repository:
        if self._repo is not None and self.clone_dir.is_dir():
            return self._repo
        private_folder(self.cache, "the controller's cache")
        try:
            repo = pygit2.Repository(str(self.clone_dir))
        except (pygit2.GitError, KeyError):
            shutil.rmtree(self.clone_dir, ignore_errors=True)
            repo = pygit2.init_repository(str(self.clone_dir), bare=False)
        if _REMOTE in repo.remotes.names():
            if repo.remotes[_REMOTE].url != self.url:
                repo.remotes.set_url(_REMOTE, self.url)
        else:
            repo.remotes.create(_REMOTE, self.url)
        self._repo = repo
        return repo

    def fetch(self) -> str:
        """The branch's newest commit in REPO (fetched into the cache)."""
        ref = f"refs/remotes/{_REMOTE}/{self.branch}"
        try:
            repo = self._open()
            repo.remotes[_REMOTE].fetch([f"+refs/heads/{self.branch}:{ref}"])
            return str(repo.references[ref].target)
        except KeyError:
            raise SourceError(
                f"ouro controller: {self.url} has no branch {self.branch!r}: push it, or name "
                "the branch with --branch") from None
        except (pygit2.GitError, OSError) as error:
            raise SourceError(
                f"ouro controller: cannot fetch {self.url} ({' '.join(str(error).split())}): "
                "check the URL, the network and the credentials; the last good revision "
                "keeps being reconciled") from error

    def export(self, commit: str) -> Path:
        """The tree of ``commit`` written into the candidate folder (validated there)."""
        repo = self._open()
        shutil.rmtree(self.candidate_dir, ignore_errors=True)
        self.candidate_dir.mkdir(mode=0o700)
        try:
            tree = repo[commit].peel(pygit2.Tree)
            repo.checkout_tree(  # type: ignore[no-untyped-call]
                tree, directory=str(self.candidate_dir),
                strategy=pygit2.enums.CheckoutStrategy.FORCE)
        except (pygit2.GitError, KeyError, ValueError) as error:
            raise SourceError(f"ouro controller: cannot read commit {commit[:12]} of "
                              f"{self.url} ({error}): delete {self.cache} to fetch it "
                              "again") from error
        return self.candidate_dir

    def adopt(self, commit: str) -> Revision:
        """Check ``commit`` out in the clone's work tree (HEAD detached at it)."""
        repo = self._open()
        try:
            target = repo[commit].peel(pygit2.Commit)
            repo.checkout_tree(  # type: ignore[no-untyped-call]
                target.tree, strategy=pygit2.enums.CheckoutStrategy.FORCE
                | pygit2.enums.CheckoutStrategy.REMOVE_UNTRACKED)
            repo.set_head(target.id)
        except (pygit2.GitError, KeyError, ValueError) as error:
            raise SourceError(f"ouro controller: cannot check out commit {commit[:12]} "
                              f"({error}): delete {self.cache} to fetch it again") from error
        return Revision(commit, self.clone_dir)

    def checked_out(self) -> str | None:
        """The revision the clone's work tree holds (None: none yet, or not readable)."""
        try:
            repo = self._open()
            if repo.head_is_detached and repo.status() == {}:
                return str(repo.head.target)
        except (pygit2.GitError, KeyError, OSError):
            pass
        return None
