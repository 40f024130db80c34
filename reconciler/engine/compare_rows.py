"""The per-generation rows that `ouro compare`, `ouro best` and the viewer's set page read.

Rule: read-only; no statistics and no rendering here. A lineage's rows are the
columns of `ouro export` (``reconciler.state.summaries.COLUMNS`` and the probes'
``probe.<name>.<metric>``), one per generation, row 0 (its seed) first when it has one,
read by one function, ``generation_rows``, from the one typed per-generation table
(``reconciler.state.table``), which `ouro export` and `ouro log` render too.

Asked only for probe columns of a lineage that has its spec, the rows come from its
observation (``Fleet.observe``: the probe records at each of the spec's probes' digest,
which is what "measured at its current digest" means, kept in the observed cache): a
1,000-member set's rows are read in a fraction of a second, not by reading 100,000
records again (bench/compare_bench.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.engine.sets import Shown
from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.load import LoadedSpec
from reconciler.spec.sets import Membership
from reconciler.state.observed import Observed

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


def _observed_columns(spec: LoadedSpec, observed: Observed,
                      columns: Collection[str]) -> dict[int, dict[str, Any]] | None:
    """The probe ``columns`` by generation (0 to N) from the observation, at the spec's
    probes' digests; None when a column names no probe of the spec (then the records are
    read as `ouro export` reads them)."""
    digests = {probe.name: probe.digest for probe in spec.probes}
    wanted: list[tuple[str, str, str]] = []
    for column in columns:
        name, _, metric = column.removeprefix("probe.").partition(".")
        if not column.startswith("probe.") or name not in digests:
            return None
        wanted.append((column, digests[name], metric))
    rows: dict[int, dict[str, Any]] = {number: {} for number in range(
        0 if observed.is_lineage else 1, observed.generations + 1)}
    for column, digest, metric in wanted:
        for number, metrics in observed.probe_metrics.get(digest, {}).items():
            if number in rows and metrics is not None and metric in metrics:
                rows[number][column] = metrics[metric]
    return rows


def generation_rows(paths: LineagePaths, cache: Path | None,
                    columns: Collection[str] | None = None,
                    spec: LoadedSpec | None = None, observed: Observed | None = None
                    ) -> tuple[dict[int, dict[str, Any]], tuple[str, ...]]:
    """The lineage's per-generation rows, row 0 (the seed) first, from the one table
    (``reconciler.state.table.lineage_table``, as `ouro export` has them): only
    ``columns``, when given; a probe column a generation lacks is absent. And the
    problems its summary names. ``spec`` and ``observed``: its spec and observation, for
    probe columns alone (the fast path: the observed cache, not every record again)."""
    from reconciler.state.summaries import summarize
    from reconciler.state.table import FIXED_COLUMNS, PROBE_PREFIX, GenerationTable, lineage_table

    if columns is not None and spec is not None and observed is not None \
            and not observed.problems:
        fast = _observed_columns(spec, observed, columns)
        if fast is not None:
            return fast, ()
    summary = summarize(paths, cache)
    lineage = lineage_table(spec.name if spec is not None else paths.name, paths, summary,
                            member=spec.member if spec is not None else None)
    every = GenerationTable((lineage,)).columns
    wanted = every if columns is None else tuple(c for c in every if c in columns)
    rows: dict[int, dict[str, Any]] = {}
    for row in lineage.rows:
        found = row.as_dict(wanted)
        rows[row.generation] = {name: value for name, value in found.items()
                                if value is not None or name in FIXED_COLUMNS
                                or not name.startswith(PROBE_PREFIX)}
    return rows, summary.problems


def shown_rows(shown: Sequence[Shown], state_dir: Path | None,
               columns: Collection[str] | None = None,
               observed: dict[str, Observed] | None = None) -> list[LineageRows]:
    """Each shown lineage's rows (``generation_rows``), its set membership and labels
    (``observed``: the lineages' observations, by name, when already made)."""
    from reconciler.state.fleet import summary_cache_dir

    cache = summary_cache_dir(state_dir)
    found = []
    for item in shown:
        rows, problems = generation_rows(item.paths, cache, columns, item.spec,
                                         (observed or {}).get(item.name))
        labels = dict(item.spec.labels) if item.spec is not None else {}
        found.append(LineageRows(item.name, item.paths, item.member, labels, rows,
                                 max(rows) if rows else None, problems,
                                 item.spec.file if item.spec is not None else None))
    return found


def lineage_rows(specs: Sequence[Path], select: Sequence[str] | None, state_dir: Path | None,
                 columns: Collection[str] | None = None,
                 command: str = "ouro compare") -> list[LineageRows]:
    """The lineages of ``specs`` that ``select`` chooses (a set's members and its orphans,
    cell by cell, as `ouro status` groups them), each with its rows. Asked for probe
    columns alone, the lineages are observed in one pass (``Fleet.observe_all``, through
    the observed cache), and where each lives is that observation's answer."""
    from reconciler.engine.fleet import Fleet
    from reconciler.engine.sets import grouped

    fleet = Fleet(state_dir, command=command, cached=True)
    loaded = fleet.load(specs)
    chosen = fleet.select(loaded, select)
    if columns is None or not all(c.startswith("probe.") for c in columns):
        return shown_rows(grouped(loaded, chosen, state_dir), state_dir, columns)
    observed = fleet.observe_all(chosen)
    return shown_rows(grouped(loaded, chosen, state_dir, lambda spec: observed[spec.name].paths),
                      state_dir, columns, observed)
