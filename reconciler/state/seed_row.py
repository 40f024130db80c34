"""Row 0 of a lineage's per-generation table: its seed. Read-only, pygit2 only.

Rule: generation 0 is the root of the lineage branch's first-parent line when that
root is no generation commit (a lineage's ``seed`` commit; a fork's root holds the
parent's generation it was born from, byte for byte, so its row 0 is that
generation's tree). Its outcome is ``seed``; it has no observation, so every number a
life records (spend, tokens, CPU, wall) is None, and its organism size is read from its
tree. A lineage whose root cannot be read, or is itself a generation commit, has no
row 0. Never raises for a damaged lineage.
"""

from __future__ import annotations

from dataclasses import replace

import pygit2

from reconciler.errors import StateError
from reconciler.kernel.base import formats
from reconciler.kernel.base.config import ORGANISM_FILE, LineagePaths
from reconciler.state.history import GenerationDetail
from reconciler.state.repos import READ_ERRORS, first_line, open_repo
from reconciler.state.summaries import GenerationRow, LineageSummary

__all__ = ["SEED_OUTCOME", "seed_detail", "seed_row", "with_seed"]

SEED_OUTCOME = "seed"

_EMPTY = GenerationRow(
    generation=0, status=SEED_OUTCOME, outcome=SEED_OUTCOME, death_cause=None,
    exit_status=None, model_failure=None, organism_bytes=None, organism_added=None,
    organism_deleted=None, paths_changed=None, model_calls=None, tokens_in=None,
    tokens_out=None, spend_usd=None, cpu_seconds=None, memory_peak_bytes=None,
    wall_seconds=None, started_at=None, external_edits_before=0, provider=None, model=None,
    lineage_commit="", observed=False)


def seed_row(paths: LineagePaths, summary: LineageSummary) -> GenerationRow | None:
    """The lineage's row 0 (None: no readable seed). Walks first parents from generation
    1's commit (the lineage head when it has none) to the root: a step or two."""
    repo = open_repo(paths.git_dir, bare=True)
    try:
        start = (repo.commit(summary.rows[0].lineage_commit) if summary.rows and repo
                 else repo.head(paths.branch) if repo is not None else None)
        if repo is None or start is None:
            return None
        root = repo.root(start)
        if formats.is_generation_subject(first_line(root)):
            return None
        size: int | None = None
        if ORGANISM_FILE in root.tree:
            blob = repo.raw.get(root.tree[ORGANISM_FILE].id)
            size = blob.size if isinstance(blob, pygit2.Blob) else None
    except (StateError, *READ_ERRORS):  # type: ignore[misc]
        return None
    return replace(_EMPTY, organism_bytes=size, lineage_commit=str(root.id))


def with_seed(paths: LineagePaths, summary: LineageSummary) -> tuple[GenerationRow, ...]:
    """The summary's rows with row 0 first, when the lineage has a readable seed."""
    seed = seed_row(paths, summary)
    return summary.rows if seed is None else (seed, *summary.rows)


def seed_detail(paths: LineagePaths, summary: LineageSummary) -> GenerationDetail:
    """What ``ouro show NAME 0`` shows: the seed's row and commit (no journal entry, no
    diff, no observation: no life made it)."""
    row = seed_row(paths, summary)
    if row is None:
        raise StateError(f"ouro: lineage {summary.name} has no readable seed (generation 0): "
                         "its root commit does not read, or is itself a generation; run "
                         "`ouro verify`")
    return GenerationDetail(row=row, commit=row.lineage_commit, parent=None,
                            journal_entry=None, diff=(), body=None, record=None)
