"""The scratch lineage a reproduction runs in, and the replay folder that answers it.

Rule: the recorded lineage is only read (its objects copied out by pygit2's pack
builder, never a ref or file of it written). The scratch lineage is born as the recorded
one was, byte for byte: its root commit is the recorded root commit made again (the same
tree, message, author and committer, times included, so the same id), and so is its
observation branch's root; the worktree is checked out from it. A fork's seed (its
parent's tree, its ancestry record) comes along with the root, so a fork reproduces like
any lineage. A recorded ``external edit`` (a person's edit between generations) is written
into the scratch worktree before its generation, for the kernel to commit as it did. The
replies are files ``000001``, ``000002``, ... of a private folder, in the
order the lineage received them: what the kernel's ``replay`` provider reads.
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
from pygit2.enums import RepositoryInitFlag as InitFlag

from reconciler.errors import OuroError
from reconciler.kernel.base.config import LineagePaths
from reconciler.kernel.transaction import publish
from reconciler.kernel.transaction.worktree import write_worktree

__all__ = ["REPLY_NAME_WIDTH", "edit_worktree", "scratch_lineage", "write_replies"]

REPLY_NAME_WIDTH = 6  # 000001: name order is reply order below a million replies
_INIT_FLAGS = InitFlag.NO_DOTGIT_DIR | InitFlag.NO_REINIT


def write_replies(folder: Path, replies: list[str]) -> Path:
    """``folder`` (made, private) holding each reply as one file, in order."""
    folder.mkdir(mode=0o700)
    width = max(REPLY_NAME_WIDTH, len(str(len(replies))))
    for number, reply in enumerate(replies, 1):
        (folder / f"{number:0{width}d}").write_bytes(reply.encode("utf-8", "surrogatepass"))
    return folder


def _copy_root(source: pygit2.Repository, target: pygit2.Repository, root: str,
               branch: str) -> pygit2.Commit:
    """``root`` made again in ``target`` on ``branch``: its tree's objects copied in one
    pack, the commit written with the recorded message, author and committer."""
    commit = source.get(root)
    if not isinstance(commit, pygit2.Commit) or commit.parents:
        raise OuroError(f"ouro: {root} is not a root commit: the record cannot be reproduced")
    builder = pygit2.PackBuilder(source)
    builder.add_recur(commit.tree.id)
    builder.write(os.path.join(target.path, "objects", "pack"))
    made = target.create_commit(f"refs/heads/{branch}", commit.author, commit.committer,
                                commit.message, commit.tree.id, [])
    copied = target.get(made)
    assert isinstance(copied, pygit2.Commit)
    return copied


def scratch_lineage(folder: Path, recorded: LineagePaths, root: str,
                    observation_root: str) -> LineagePaths:
    """A lineage in ``folder`` (which must exist, empty) that is ``recorded``'s seed, on
    the same branch names: the places the kernel then extends."""
    paths = LineagePaths(folder / "lineage", folder / "lineage.git",
                         folder / "lineage.observations", recorded.branch,
                         recorded.observation_branch, name=recorded.name)
    flags = pygit2.enums.RepositoryOpenFlag
    source = pygit2.Repository(str(recorded.git_dir), flags.NO_SEARCH | flags.BARE)
    source_obs = pygit2.Repository(str(recorded.observations), flags.NO_SEARCH)
    for place in (paths.worktree, paths.git_dir, paths.observations):
        place.mkdir()
    repo = pygit2.init_repository(str(paths.git_dir), bare=False, flags=_INIT_FLAGS,
                                  workdir_path=str(paths.worktree),
                                  initial_head=f"refs/heads/{paths.branch}")
    (paths.worktree / ".git").write_text(f"gitdir: {paths.git_dir}\n", encoding="utf-8")
    repo.config["core.worktree"] = str(paths.worktree)
    publish.checkout_worktree(repo, _copy_root(source, repo, root, paths.branch))
    observed = pygit2.init_repository(str(paths.observations), bare=False,
                                      flags=InitFlag.NO_REINIT,
                                      initial_head=f"refs/heads/{paths.observation_branch}")
    first = _copy_root(source_obs, observed, observation_root, paths.observation_branch)
    write_worktree(observed, Path(paths.observations), first.tree)
    return paths


def edit_worktree(recorded: LineagePaths, scratch: LineagePaths, tree: str) -> None:
    """The scratch worktree made ``tree`` (a recorded ``external edit``'s), its branch left
    where it is: the kernel commits it as the edit it was before the next generation."""
    flags = pygit2.enums.RepositoryOpenFlag
    source = pygit2.Repository(str(recorded.git_dir), flags.NO_SEARCH | flags.BARE)
    target = pygit2.Repository(str(scratch.git_dir), flags.NO_SEARCH | flags.BARE)
    builder = pygit2.PackBuilder(source)
    builder.add_recur(pygit2.Oid(hex=tree))
    builder.write(os.path.join(target.path, "objects", "pack"))
    found = target.get(tree)
    assert isinstance(found, pygit2.Tree)
    write_worktree(target, Path(scratch.worktree), found)
