"""The per-generation table: one typed row per generation of each lineage. Read-only.

Rule: this is the one home of the table that ``ouro export`` (CSV, JSON lines, JSON,
MLflow), ``ouro log``, ``ouro compare`` and the viewer's plots render. Nothing here
renders text and nothing parses text back: a renderer asks a row for its columns by
name (``TableRow.value``) and formats them itself.

Row 0 is the seed's (``reconciler.state.seed_row``): generation 0, outcome ``seed``, the
root commit's organism size, the probes' generation-0 values; a fork's row 0 carries its
descent, so its ``absolute_generation`` is the parent's generation it was born from.

A row joins, for one generation of one lineage:

- the summary's ``GenerationRow`` (``reconciler.state.summaries``): outcome, sizes,
  model calls, spend, CPU, memory, kernel;
- the lineage's place in its set (``Membership``: set, cell, replica, orphaned,
  matrix values), ``None`` outside a set; in a selected set (``spec.selection``), the
  ``epoch`` the generation ran in (``Membership.epoch``: a member born into epoch b ran
  its generations 1..every in b, each further ``every`` in the next epoch; its seed,
  row 0, is in b), ``None`` elsewhere;
- its descent (``Descent``): a fork's parent lineage and the parent's generation it
  was born from, and the absolute generation counted from the root ancestor's seed
  (``None``, unknown, when an ancestor is not present or not the recorded one);
- what the probes measured at each probe's current digest
  (``reconciler.state.probes.ProbeTable``): ``probe.<name>.<metric>`` values, and
  ``probe_failure.<name>``, the reason a probe failed at that generation, so that a
  failure (a reason) and "not measured" (no record: no value, no reason) differ.

The column order (``GenerationTable.columns``) is the export's: ``FIXED_COLUMNS``,
then every ``probe.<name>.<metric>`` sorted, every ``probe_failure.<name>`` sorted,
then ``matrix.<key>`` in the order the sets write them. Unknown is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.sets import Membership
from reconciler.state.forks import holds_commit, recorded_ancestry
from reconciler.state.probes import ProbeTable
from reconciler.state.probes import table as probe_table
from reconciler.state.seed_row import with_seed
from reconciler.state.summaries import COLUMNS, GenerationRow, LineageSummary

if TYPE_CHECKING:
    from reconciler.spec.load import LoadedSpec

__all__ = [
    "DESCENT_COLUMNS",
    "EPOCH_COLUMN",
    "FAILURE_PREFIX",
    "FIXED_COLUMNS",
    "MATRIX_PREFIX",
    "PROBE_PREFIX",
    "ROW_COLUMNS",
    "SET_COLUMNS",
    "Descent",
    "GenerationTable",
    "LineageTable",
    "TableRow",
    "descent",
    "lineage_table",
]

ROW_COLUMNS: tuple[str, ...] = COLUMNS  # the summary's GenerationRow, in its order
SET_COLUMNS = ("set", "cell", "replica", "orphaned")
EPOCH_COLUMN = "epoch"  # a selected set's: the epoch the generation ran in
DESCENT_COLUMNS = ("parent_lineage", "parent_generation", "absolute_generation")
FIXED_COLUMNS: tuple[str, ...] = ("lineage", *ROW_COLUMNS, *SET_COLUMNS, EPOCH_COLUMN,
                                  *DESCENT_COLUMNS)
PROBE_PREFIX = "probe."  # probe.<name>.<metric>: a value the probe printed
FAILURE_PREFIX = "probe_failure."  # probe_failure.<name>: why that probe failed
MATRIX_PREFIX = "matrix."  # matrix.<key>: the member's cell's value, as the set writes it
MAX_ANCESTORS = 64  # a longer chain of forks (or a cycle of forged records) is unknown


@dataclass(frozen=True)
class Descent:
    """Where a lineage comes from. ``parent_lineage``/``parent_generation``: a fork's
    parent and the parent's generation it was born from (None: not a fork).
    ``seed_generation``: the absolute generation of this lineage's seed, counted from its
    root ancestor's seed (0 for a lineage that is no fork; a fork's is its parent's
    generation's; None: unknown, an ancestor not present or not the recorded one)."""

    parent_lineage: str | None = None
    parent_generation: int | None = None
    seed_generation: int | None = 0

    def absolute(self, generation: int) -> int | None:
        """Generation ``generation`` of this lineage counted from the root ancestor's seed."""
        return None if self.seed_generation is None else self.seed_generation + generation


@dataclass(frozen=True)
class TableRow:
    """One generation of one lineage, every column of the table typed (see the module)."""

    lineage: str
    facts: GenerationRow  # the summary's row: generation, outcome, sizes, spend, ...
    member: Membership | None = None  # its place in its set (None: not in a set)
    descent: Descent = field(default_factory=Descent)
    probes: Mapping[str, Any] = field(default_factory=dict)  # probe.<name>.<metric> -> value
    probe_failures: Mapping[str, str] = field(default_factory=dict)  # probe name -> reason

    @property
    def generation(self) -> int:
        return self.facts.generation

    @property
    def absolute_generation(self) -> int | None:
        return self.descent.absolute(self.facts.generation)

    def value(self, column: str) -> Any:
        """The value of any column of the table by its name (None: unknown, or a column
        this row does not have)."""
        if column in _FACTS:
            return getattr(self.facts, column)
        if column in _OWN:
            return _OWN[column](self)
        if column.startswith(FAILURE_PREFIX):
            return self.probe_failures.get(column.removeprefix(FAILURE_PREFIX))
        if column.startswith(PROBE_PREFIX):
            return self.probes.get(column)
        if column.startswith(MATRIX_PREFIX) and self.member is not None:
            return self.member.matrix.get(column.removeprefix(MATRIX_PREFIX))
        return None

    def as_dict(self, columns: Sequence[str]) -> dict[str, Any]:
        """``columns`` -> this row's values (None: unknown), in that order."""
        return {column: self.value(column) for column in columns}


def _member(attribute: str) -> Callable[[TableRow], Any]:
    def read(row: TableRow) -> Any:
        return None if row.member is None else getattr(row.member, attribute)
    return read


_FACTS = frozenset(ROW_COLUMNS)
_OWN: dict[str, Callable[[TableRow], Any]] = {
    "lineage": lambda row: row.lineage,
    "set": _member("set_name"),
    "cell": _member("cell"),
    "replica": _member("replica"),
    "orphaned": _member("orphaned"),
    EPOCH_COLUMN: lambda row: None if row.member is None else row.member.epoch(row.generation),
    "parent_lineage": lambda row: row.descent.parent_lineage,
    "parent_generation": lambda row: row.descent.parent_generation,
    "absolute_generation": lambda row: row.absolute_generation,
}


@dataclass(frozen=True)
class LineageTable:
    """One lineage's part of the table: its rows, and what they were built from (its
    summary for the totals and problems, its probes' table, its spec when named)."""

    name: str
    paths: LineagePaths
    summary: LineageSummary
    rows: tuple[TableRow, ...]
    probes: ProbeTable
    member: Membership | None = None
    descent: Descent = field(default_factory=Descent)
    spec: LoadedSpec | None = None  # its spec, when the command was given specs

    def only(self, keep: Callable[[TableRow], bool]) -> LineageTable:
        """The same lineage with only the rows ``keep`` accepts (``ouro log``'s filters)."""
        return LineageTable(self.name, self.paths, self.summary,
                            tuple(row for row in self.rows if keep(row)), self.probes,
                            self.member, self.descent, self.spec)


@dataclass(frozen=True)
class GenerationTable:
    """The table of several lineages, in the order they are shown (a set's members
    together, cell by cell), and its columns."""

    lineages: tuple[LineageTable, ...]

    @property
    def rows(self) -> Iterator[TableRow]:
        """Every row, lineage by lineage, generation by generation."""
        for lineage in self.lineages:
            yield from lineage.rows

    @cached_property
    def probe_columns(self) -> tuple[str, ...]:
        """Every ``probe.<name>.<metric>`` any lineage measured, sorted."""
        return tuple(sorted({column for lineage in self.lineages
                             for column in lineage.probes.values}))

    @cached_property
    def failure_columns(self) -> tuple[str, ...]:
        """``probe_failure.<name>`` for every probe with a record in any lineage, sorted."""
        names = {name for lineage in self.lineages for name in lineage.probes.failures}
        names |= {name for lineage in self.lineages
                  for name in lineage.probes.probe_of.values()}
        return tuple(FAILURE_PREFIX + name for name in sorted(names))

    @cached_property
    def matrix_columns(self) -> tuple[str, ...]:
        """``matrix.<key>`` for every key of the members' sets, in the sets' order."""
        keys: dict[str, None] = {}
        for lineage in self.lineages:
            if lineage.member is not None:
                keys.update(dict.fromkeys(lineage.member.matrix))
        return tuple(MATRIX_PREFIX + key for key in keys)

    @cached_property
    def columns(self) -> tuple[str, ...]:
        """Every column, in the export's order (docs/export.md)."""
        return (*FIXED_COLUMNS, *self.probe_columns, *self.failure_columns,
                *self.matrix_columns)

    def only(self, keep: Callable[[TableRow], bool]) -> GenerationTable:
        """The same lineages with only the rows ``keep`` accepts (the columns unchanged:
        a column measured only in a row left out stays a column)."""
        found = GenerationTable(tuple(lineage.only(keep) for lineage in self.lineages))
        for name in ("probe_columns", "failure_columns", "matrix_columns", "columns"):
            found.__dict__[name] = getattr(self, name)
        return found


def descent(paths: LineagePaths,
            places: Callable[[str], LineagePaths | None]) -> Descent:
    """The descent of the lineage at ``paths``: its fork record's parent and generation
    (``reconciler.state.forks.recorded_ancestry``), and its seed's absolute generation,
    found by following each parent (``places(name)``: where a lineage of that name lives,
    if known) while the parent there is the recorded one (it has the recorded commit)."""
    record = recorded_ancestry(paths)
    if record is None:
        return Descent()
    parent, generation = record.get("parent"), record.get("generation")
    parent = parent if isinstance(parent, str) else None
    generation = (generation if isinstance(generation, int)
                  and not isinstance(generation, bool) else None)
    return Descent(parent, generation, _seed(record, places, MAX_ANCESTORS))


def _seed(record: Mapping[str, Any], places: Callable[[str], LineagePaths | None],
          depth: int) -> int | None:
    """The absolute generation of a fork's seed (its parent's generation, counted from
    the root ancestor's seed); None when a link of the chain is not present."""
    parent, generation = record.get("parent"), record.get("generation")
    if (depth <= 0 or not isinstance(parent, str) or not isinstance(generation, int)
            or isinstance(generation, bool)):
        return None
    where = places(parent)
    if where is None or not holds_commit(where, record.get("commit")):
        return None
    above = recorded_ancestry(where)
    if above is None:
        return generation
    offset = _seed(above, places, depth - 1)
    return None if offset is None else offset + generation


def lineage_table(name: str, paths: LineagePaths, summary: LineageSummary, *,
                  member: Membership | None = None, spec: LoadedSpec | None = None,
                  places: Callable[[str], LineagePaths | None] = lambda _name: None,
                  probes: ProbeTable | None = None) -> LineageTable:
    """One lineage's rows: its seed's row 0 (``reconciler.state.seed_row``: generation 0,
    outcome ``seed``, when the root commit reads) then its summary's rows, each joined
    with its set place, its descent (``places``: where a fork's ancestors live, by name)
    and its probes' table (read from its probe records unless given)."""
    measured = probe_table(paths) if probes is None else probes
    origin = descent(paths, places)
    values: dict[int, dict[str, Any]] = {}
    for column, found in measured.values.items():
        for generation, value in found.items():
            values.setdefault(generation, {})[column] = value
    failures: dict[int, dict[str, str]] = {}
    for probe, reasons in measured.failures.items():
        for generation, reason in reasons.items():
            failures.setdefault(generation, {})[probe] = reason
    rows = tuple(TableRow(name, facts, member, origin, values.get(facts.generation, {}),
                          failures.get(facts.generation, {}))
                 for facts in with_seed(paths, summary))  # row 0 (the seed) first
    return LineageTable(name, paths, summary, rows, measured, member, origin, spec)
