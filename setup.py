"""Build hook: a built ouro records the instrument commit it was built from.

An installed wheel has no git checkout to ask, so ``build_py`` writes the commit
into the built package as ``reconciler/state/_build_commit.txt`` (read by
``reconciler.state.instrument``). The commit comes from, in order: the HEAD of
the git checkout being built (refused while the kernel has uncommitted changes:
uncommitted physics have no commit to name), the file an sdist shipped, then
``OURO_INSTRUMENT_COMMIT``. With none of them the file is not written and the
installed ouro says how to name its commit. An editable install writes nothing:
it reads its checkout's HEAD at run time, and a file left in the source tree
would go stale at the next commit.

Build code does not import the package it builds; ``tests/test_install.py``
checks that the names below agree with ``reconciler.state.instrument``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
BUILD_COMMIT = Path("reconciler", "state", "_build_commit.txt")
KERNEL = "reconciler/kernel/"
OBJECT_ID = re.compile(r"\A(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")


def _warn(message: str) -> None:
    print(f"ouro build: warning: {message}", file=sys.stderr)


def _from_checkout() -> str | None:
    try:
        import pygit2
    except ImportError:  # pragma: no cover - pygit2 is a build requirement
        return None
    found = pygit2.discover_repository(str(HERE))
    if not found:
        return None
    repo = pygit2.Repository(found)
    if repo.workdir is None or Path(repo.workdir).resolve() != HERE or repo.head_is_unborn:
        return None  # not ouro's own checkout (e.g. an unpacked sdist inside another repo)
    dirty = sorted(
        path
        for path, flags in repo.status().items()
        if path.startswith(KERNEL)
        and flags not in (pygit2.GIT_STATUS_CURRENT, pygit2.GIT_STATUS_IGNORED)
        and not path.endswith(".pyc")
    )
    if dirty:
        _warn(
            f"the kernel has uncommitted changes ({', '.join(dirty[:5])}): no instrument "
            "commit recorded; this build cannot run generations until it is given one "
            "(OURO_INSTRUMENT_COMMIT)"
        )
        return None
    return str(repo.head.target)


def instrument_commit() -> str | None:
    commit = _from_checkout()
    if commit is None and (HERE / BUILD_COMMIT).is_file():
        commit = (HERE / BUILD_COMMIT).read_text(encoding="ascii").strip()  # from an sdist
    if commit is None:
        commit = os.environ.get("OURO_INSTRUMENT_COMMIT", "").strip().lower() or None
    if commit is not None and not OBJECT_ID.match(commit):
        _warn(f"{commit!r} is not a full git commit id: no instrument commit recorded")
        return None
    return commit


def _record(root: Path) -> None:
    commit = instrument_commit()
    if commit is None:
        _warn("no instrument commit found (no git checkout, no OURO_INSTRUMENT_COMMIT)")
        return
    target = root / BUILD_COMMIT
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(commit + "\n", encoding="ascii")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            _record(Path(self.build_lib))


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        _record(Path(base_dir))


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
