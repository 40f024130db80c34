"""The per-generation rows that `ouro compare`, `ouro best` and the viewer's set page read.

Rule: read-only; no statistics and no rendering here. A lineage's rows are the
columns of `ouro export` (``reconciler.state.summaries.COLUMNS`` and the probes'
``probe.<name>.<metric>``), one per generation, row 0 (its seed) first when it has one,
read by one function, ``generation_rows``: the one place that knows where those rows
come from (today the summaries and the probe records, as `ouro export` reads them), so
that a typed per-generation table can take its place there alone.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.engine.sets import Shown
from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.sets import Membership

__all__ = ["LineageRows", "generation_rows", "lineage_rows", "shown_rows"]


@dataclass(frozen=True)
class LineageRows:
    """A lineage's rows (generation -> column -> value; only the columns asked for) and
    the newest generation its history has (None: no generation, no seed)."""

    name: str
    paths: LineagePaths
    member: Membership | None
    labels: dict[str, str] = field(default_factory=dict)
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    last: int | None = None
    problems: tuple[str, ...] = ()
    spec_file: Path | None = None  # the spec that declares it (None: an orphan)


def generation_rows(paths: LineagePaths, cache: Path | None,
                    columns: Collection[str] | None = None
                    ) -> tuple[dict[int, dict[str, Any]], tuple[str, ...]]:
    """The lineage's per-generation rows, row 0 first, as `ouro export` has them (only
    ``columns``, when given; a probe column a generation lacks is absent), and the
    problems its summary names. The adapter: the one place to swap for a typed table."""
    from reconciler.state.probes import columns as probe_columns
    from reconciler.state.seed_row import with_seed
    from reconciler.state.summaries import COLUMNS, summarize

    summary = summarize(paths, cache)
    wanted = COLUMNS if columns is None else tuple(c for c in COLUMNS if c in columns)
    probes = (probe_columns(paths) if columns is None
              or any(c.startswith("probe.") for c in columns) else {})
    rows: dict[int, dict[str, Any]] = {}
    for row in with_seed(paths, summary):
        found = {name: getattr(row, name) for name in wanted}
        measured = probes.get(row.generation, {})
        found.update(measured if columns is None
                     else {k: v for k, v in measured.items() if k in columns})
        rows[row.generation] = found
    return rows, summary.problems


def shown_rows(shown: Sequence[Shown], state_dir: Path | None,
               columns: Collection[str] | None = None) -> list[LineageRows]:
    """Each shown lineage's rows (``generation_rows``), its set membership and labels."""
    from reconciler.state.fleet import summary_cache_dir

    cache = summary_cache_dir(state_dir)
    found = []
    for item in shown:
        rows, problems = generation_rows(item.paths, cache, columns)
        labels = dict(item.spec.labels) if item.spec is not None else {}
        found.append(LineageRows(item.name, item.paths, item.member, labels, rows,
                                 max(rows) if rows else None, problems,
                                 item.spec.file if item.spec is not None else None))
    return found


def lineage_rows(specs: Sequence[Path], select: Sequence[str] | None, state_dir: Path | None,
                 columns: Collection[str] | None = None,
                 command: str = "ouro compare") -> list[LineageRows]:
    """The lineages of ``specs`` that ``select`` chooses (a set's members and its orphans,
    cell by cell, as `ouro status` groups them), each with its rows."""
    from reconciler.engine.fleet import Fleet
    from reconciler.engine.sets import grouped

    fleet = Fleet(state_dir, command=command)
    loaded = fleet.load(specs)
    chosen = fleet.select(loaded, select)
    return shown_rows(grouped(loaded, chosen, state_dir), state_dir, columns)
