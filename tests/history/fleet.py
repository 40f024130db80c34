"""A grown fleet for the history commands and the viewer: real lineages, real kernel.

Built once per test session (real bubblewrap, cgroups and Emacs, offline
providers), under one temporary state dir:

- ``scribe`` and ``quiet``: the offline default fleet in ``specs/``, as shipped;
- ``story``: scribe's replies, grown to 3 generations, then a human's edit of
  the worktree (an ``external edit`` commit), then grown to 6: generation 4
  dies (exit 255), generation 6 finds the replies exhausted (a model failure);
- ``hostile``: an organism whose file names, journal (through its stderr) and
  stderr hold ``<script>``, ``<img onerror>`` and ``javascript:`` text; its
  third life dies printing them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.kernel.config import LineagePaths
from reconciler.spec.load import default_places
from tests.apply.helpers import REPO_ROOT, run_ouro, write_replies, write_spec

HOSTILE_NAMES = (
    "<script>window.__ouro_pwned=1<script>.txt",
    "<img src=x onerror=window.__ouro_pwned=2>.txt",
    "javascript:window.__ouro_pwned=3",
)
HOSTILE_STDERR = (
    "<script>window.__ouro_pwned=4</script>",
    '<img src=x onerror="window.__ouro_pwned=5">',
    "javascript:window.__ouro_pwned=6",
)


def _elisp_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


HOSTILE_BODY = (
    ";;; organism.el --- <script>window.__ouro_pwned=8</script>\n"
    "(let ((names (list " + " ".join(_elisp_string(n) for n in HOSTILE_NAMES) + ")))\n"
    "  (if (file-exists-p (expand-file-name (car names) \"/work\"))\n"
    "      (progn\n"
    + "".join(f"        (message \"%s\" {_elisp_string(line)})\n" for line in HOSTILE_STDERR)
    + "        (kill-emacs 3))\n"
    "    (dolist (name names)\n"
    "      (with-temp-file (expand-file-name name \"/work\")\n"
    "        (insert \"<script>window.__ouro_pwned=7</script>\\n\")))))\n"
)


@dataclass(frozen=True)
class Fleet:
    root: Path
    state: Path
    specs: Path  # a folder of the four specs
    env: dict[str, str]

    def paths(self, name: str) -> LineagePaths:
        return default_places(self.state / name, name)


def _apply(env: dict[str, str], *specs: Path) -> None:
    result = run_ouro("apply", "--yes", *map(str, specs), env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def build_fleet(root: Path) -> Fleet:
    state = root / "state"
    specs = root / "specs"
    specs.mkdir(parents=True)
    env = dict(os.environ)
    env["OURO_STATE_DIR"] = str(state)
    shutil.copy(REPO_ROOT / "specs" / "fleet.yaml", specs / "fleet.yaml")
    shutil.copytree(REPO_ROOT / "specs" / "replies", specs / "replies")
    scribe_replies = specs / "replies" / "scribe"
    story = write_spec(specs, "story", 3, provider="replay", replay=str(scribe_replies))
    _apply(env, specs / "fleet.yaml", story)
    (state / "story" / "notes.md").write_text("a human was here <b>bold</b>\n")
    write_spec(specs, "story", 6, provider="replay", replay=str(scribe_replies))
    replies = write_replies(root / "hostile-replies", [HOSTILE_BODY])
    hostile = write_spec(specs, "hostile", 3, provider="replay", replay=str(replies))
    _apply(env, story, hostile)
    return Fleet(root, state, specs, env)


@pytest.fixture(scope="session")
def grown_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield build_fleet(tmp_path_factory.mktemp("fleet"))
