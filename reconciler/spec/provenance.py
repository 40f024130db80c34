"""Where a spec came from, for GitOps: its digest and, if it is in git, which commit.

Recorded in every observation a spec causes (the kernel's ``Provenance``).
Read with pygit2; a spec outside any repository simply has no commit.
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from reconciler.kernel.base.config import Provenance


def spec_provenance(spec_file: Path, spec_sha256: str) -> Provenance:
    commit: str | None = None
    relative: str | None = None
    try:
        found = pygit2.discover_repository(str(spec_file.parent))
        if found:
            repo = pygit2.Repository(found)
            if repo.workdir and not repo.head_is_unborn:
                commit = str(repo.head.target)
                relative = spec_file.resolve().relative_to(Path(repo.workdir).resolve()).as_posix()
                if repo.status_file(relative) != pygit2.GIT_STATUS_CURRENT:
                    relative += " (uncommitted changes)"
    except (pygit2.GitError, ValueError, KeyError, OSError):
        commit, relative = None, None
    return Provenance(spec_sha256=spec_sha256, spec_repository_commit=commit, spec_path=relative)
