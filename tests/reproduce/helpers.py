"""Real replay lineages for the reproduction tests, and what proves a lineage untouched."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pygit2

from tests.apply.helpers import REPO_ROOT, run_ouro, write_spec

__all__ = ["CLOCK_BODY", "MOODS_BODY", "fingerprint", "grow", "reproduce_json", "scribe"]

# Writes the time it lives at into its tree: no two lives can leave the same tree.
CLOCK_BODY = ('(with-temp-file "/work/now.txt"\n'
              '  (insert (format-time-string "%Y-%m-%dT%H:%M:%S.%N")))\n')
# Counts the journal's entries: after 1 it changes nothing, after 2 it dies, after 3
# changes nothing again (a no-change, a death, a no-change).
MOODS_BODY = ('(let ((n (with-temp-buffer (insert-file-contents "/kernel/journal.md")\n'
              '           (how-many "^## gen " (point-min) (point-max)))))\n'
              '  (when (= n 2) (message "moods: not today") (kill-emacs 3)))\n')


def grow(specs: Path, env: dict[str, str], name: str, generations: int,
         replies: list[str], extra: str = "") -> Path:
    """A replay lineage ``name`` applied for real; its spec's path. Spare replies follow
    ``replies`` (apply stops a replay lineage whose folder has none left for the next
    generation, whether or not its organism would ask)."""
    folder = specs / "replies" / name
    folder.mkdir(parents=True)
    spare = [";; a spare reply, never asked for\n"] * generations
    for number, reply in enumerate([*replies, *spare], 1):
        (folder / f"{number:04d}").write_text(reply)
    spec = write_spec(specs, name, generations, provider="replay",
                      replay=f"replies/{name}")
    if extra:
        spec.write_text(spec.read_text() + extra)
    done = run_ouro("apply", "-y", "--no-provider-check", str(spec), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return spec


def scribe(specs: Path, env: dict[str, str]) -> Path:
    """The default fleet's scribe (5 generations of replay: 4 changed, 1 died), applied."""
    shutil.copytree(REPO_ROOT / "specs", specs, dirs_exist_ok=True)
    done = run_ouro("apply", "-y", "--no-provider-check", "--select", "scribe",
                    str(specs / "fleet.yaml"), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return specs / "fleet.yaml"


def reproduce_json(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    done = run_ouro("reproduce", "--json", *args, env=env)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def fingerprint(state: Path, name: str) -> dict[str, Any]:
    """Everything of a lineage's three places: each repository's refs and object count,
    and every file's bytes (digested) with its mode, below the three places."""
    found: dict[str, Any] = {}
    for place, opened in ((state / f"{name}.git", True), (state / name, False),
                          (state / f"{name}.observations", True)):
        if opened:
            repo = pygit2.Repository(str(place))
            found[f"{place.name}:refs"] = {ref: str(repo.lookup_reference(ref).target)
                                           for ref in repo.references}
            found[f"{place.name}:objects"] = sum(1 for _ in repo.odb)
        for root, _, files in os.walk(place):
            for file in files:
                path = Path(root) / file
                info = path.lstat()
                found[str(path)] = (info.st_mode, info.st_mtime_ns,
                                    hashlib.sha256(path.read_bytes()).hexdigest()
                                    if path.is_file() and not path.is_symlink() else None)
    return found
