"""A selected LineageSet's next decision, from the recorded table. Read-only.

Rule: the decision itself is ``reconciler.plan.selection``'s pure function; here its
inputs are read: each living member's last generation and the values the rule reads
there, from the per-generation table (``reconciler.state.table``), never from a live
process. A member that has not yet run the epoch's ``every`` generations makes the
selection wait, named like a missing measurement.

The epochs (which members live in which epoch) are ``reconciler.engine.epochs``'; the
record's evidence and its verification, ``reconciler.engine.selection_records``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.engine.epochs import EPOCH_LABEL, current_epoch, selected_sets, write_record
from reconciler.engine.selection_records import evidence
from reconciler.plan.selection import Candidate, Decision, columns, decide, rng
from reconciler.spec.load import LoadedSpec
from reconciler.spec.selection import SelectionSpec
from reconciler.state.table import GenerationTable, TableRow

__all__ = ["SetSelection", "advance", "candidates", "record", "selections", "selections_json"]

FIRST_EPOCH = 1


@dataclass(frozen=True)
class SetSelection:
    """A selected set's decision at the end of its current epoch."""

    set_name: str
    rule: SelectionSpec
    decision: Decision
    candidates: tuple[Candidate, ...] = ()  # what the decision read

    def as_json(self) -> dict[str, Any]:
        return {"set": self.set_name, "method": self.rule.method, "by": self.rule.by,
                "lowest": self.rule.lowest, "seed": self.rule.seed,
                **self.decision.as_json()}

    def lines(self) -> list[str]:
        """The decision as ``ouro plan`` prints it."""
        rule, decision = self.rule, self.decision
        head = (f"selection of set {self.set_name}, end of epoch {decision.epoch} "
                f"({rule.method} by {rule.by}, {'lowest' if rule.lowest else 'highest'} "
                f"first, seed {rule.seed}):")
        if decision.waiting:
            return [head, "  waits for: " + ", ".join(decision.waits_for)]
        shown = [head]
        shown += [f"  keep {name} ({decision.values[name]:g})" for name in decision.kept]
        shown += [f"  stop {name} ({decision.values[name]:g}): not-selected"
                  for name in decision.stopped]
        shown += [f"  fork {b.name} from {b.parent} gen {b.generation} ({b.value:g})"
                  for b in decision.born]
        return shown


def _last(rows: Sequence[TableRow]) -> TableRow | None:
    return max(rows, key=lambda row: row.generation) if rows else None


def candidates(table: GenerationTable, names: Sequence[str], rule: SelectionSpec,
               wanted: Mapping[str, int]) -> tuple[list[Candidate], list[str]]:
    """Each member's candidate at its last generation, and the members that have not run
    the generations the epoch wants of them (``member: generation N (has M)``)."""
    rows: dict[str, list[TableRow]] = {name: [] for name in names}
    for lineage in table.lineages:
        if lineage.name in rows:
            rows[lineage.name].extend(lineage.rows)
    found: list[Candidate] = []
    short: list[str] = []
    for name in names:
        last = _last(rows[name])
        have = last.generation if last is not None else 0
        if have < wanted[name]:
            short.append(f"{name}: generation {wanted[name]} (has {have})")
            continue
        assert last is not None
        found.append(Candidate(name, last.generation,
                               {column: last.value(column) for column in columns(rule)}))
    return found, short


def selections(specs: Sequence[LoadedSpec], table_of: Any,
               home: Path | None = None) -> list[SetSelection]:
    """The decision of each selected set among ``specs`` at the end of its current epoch
    (``table_of(names)``: the table of those lineages; ``home``: the state dir, where
    the records are; None: the first epoch). A set past its last epoch has none."""
    found: list[SetSelection] = []
    for set_name, rule, chosen in selected_sets(specs):
        epoch, names = FIRST_EPOCH, sorted(spec.name for spec in chosen)
        if home is not None:
            epoch, names = current_epoch(chosen, rule, home)
        if epoch >= rule.epochs:
            continue
        size = sum(1 for spec in chosen if EPOCH_LABEL not in spec.labels)  # epoch 1's
        table: GenerationTable = table_of(names)
        born = {spec.name: int(spec.labels.get(EPOCH_LABEL, "1")) for spec in chosen}
        living, short = candidates(table, names, rule,
                                   {name: (epoch - born.get(name, 1) + 1) * rule.every
                                    for name in names})
        if short:
            decision = Decision(epoch, waits_for=tuple(short))
        else:
            decision = decide(living, rule, epoch, rng(rule.seed, epoch),
                              set_name=set_name, size=size)
        found.append(SetSelection(set_name, rule, decision, tuple(living)))
    return found


def record(chosen: SetSelection, specs: Sequence[LoadedSpec]) -> None:
    """Write the decision's record into each candidate's observations, before anything
    acts on it (``reconciler.engine.epochs``)."""
    by_name = {spec.name: spec for spec in specs}
    document = {**chosen.as_json(),
                "candidates": evidence(chosen.candidates,
                                       {name: spec.paths() for name, spec in by_name.items()})}
    for name in sorted(chosen.decision.values):
        write_record(by_name[name].paths(), chosen.set_name, document)


def advance(fleet: Any, paths: Sequence[Path], select: Sequence[str] | None = ()) -> bool:
    """Record every selected set's decision that no longer waits; True when one was
    recorded (the set has a new epoch to apply)."""
    specs = fleet.select(fleet.load(paths), select)
    decided = [one for one in selections(specs, table_reader(fleet, paths), fleet.state_dir)
               if not one.decision.waiting]
    for one in decided:
        record(one, specs)
    return bool(decided)


def selections_json(found: Sequence[SetSelection]) -> list[dict[str, Any]]:
    return [one.as_json() for one in found]


def table_reader(fleet: Any, paths: Sequence[Path]) -> Any:
    """``table_of`` for ``selections``: the fleet's table of those names."""
    def table_of(names: Sequence[str]) -> GenerationTable:
        result: GenerationTable = fleet.table(list(names), list(paths))
        return result
    return table_of
