"""One file of a generation's tree, byte for byte: what `ouro cat` prints. Read-only.

Rule: pygit2 only; the blob at ``path`` in the commit's tree, exactly as stored (a
symbolic link's blob is its target, as ``git show COMMIT:PATH`` prints it). A path
that is not there, or names a folder, is a ``StateError`` naming what is there.
"""

from __future__ import annotations

import pygit2

from reconciler.errors import StateError
from reconciler.kernel.base.config import LineagePaths
from reconciler.state.repos import READ_ERRORS, open_repo

__all__ = ["file_at"]


def file_at(paths: LineagePaths, commit: str, path: str, where: str) -> bytes:
    """The bytes of ``path`` in ``commit``'s tree (``where``: the error's prefix, e.g.
    "ouro cat: NAME gen 3")."""
    repo = open_repo(paths.git_dir, bare=True)
    if repo is None:
        raise StateError(f"{where}: {paths.git_dir} is not a readable git repository")
    clean = path.strip("/")
    try:
        found = repo.commit(commit)
        if found is None:
            raise StateError(f"{where}: commit {commit} is missing; run `ouro verify`")
        tree = found.tree
        try:
            entry = tree[clean] if clean else None
        except KeyError:
            entry = None
        if entry is None:
            top = ", ".join(sorted(str(item.name) for item in tree))
            raise StateError(f"{where}: no file {path!r} in its tree (at the top: {top})")
        if entry.type_str != "blob":
            inner = repo.raw.get(entry.id)
            names = (", ".join(sorted(str(item.name) for item in inner))
                     if isinstance(inner, pygit2.Tree) else "")
            raise StateError(f"{where}: {path!r} is a folder, not a file"
                             + (f" (it holds: {names})" if names else ""))
        blob = repo.raw.get(entry.id)
        if not isinstance(blob, pygit2.Blob):
            raise StateError(f"{where}: {path!r} does not read as a file; run `ouro verify`")
        return bytes(blob.data)
    except StateError:
        raise
    except READ_ERRORS as error:
        raise StateError(f"{where}: {path!r} does not read ({error}); run `ouro verify`") \
            from error
