"""What ``ouro status`` shows of a selected LineageSet: its epochs. Read-only.

Rule: nothing is decided here. The current epoch and the living members are
``reconciler.engine.epochs``' (the decisions' records); each epoch's fitness is read from
the one per-generation table (``reconciler.state.table``): the value of the rule's
``by`` at each member's last generation of that epoch (the generation a decision at its
end reads). An epoch whose members have not yet reached its end has only those that
have. Their statistics (count, best, mean and its CI) are the report layer's
(``reconciler.report.epoch_fitness``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.engine.epochs import current_epoch, selected_sets
from reconciler.spec.load import LoadedSpec
from reconciler.spec.selection import SelectionSpec
from reconciler.state.table import GenerationTable, LineageTable

__all__ = ["SetEpochs", "epoch_values", "set_epochs"]


@dataclass(frozen=True)
class SetEpochs:
    """A selected set as ``ouro status`` shows it."""

    set_name: str
    rule: SelectionSpec
    epoch: int  # the current epoch (the records decided every one before it)
    living: tuple[str, ...]  # the members of the current epoch (the survivors and the born)
    values: Mapping[int, Mapping[str, float]]  # epoch 1 to the current one: member -> by

    def as_json(self) -> dict[str, Any]:
        """The set and its epochs (their fitness: ``reconciler.report.epoch_fitness``)."""
        return {"set": self.set_name, "epoch": self.epoch, "epochs": self.rule.epochs,
                "method": self.rule.method, "by": self.rule.by, "lowest": self.rule.lowest,
                "living": list(self.living)}


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def epoch_values(lineages: Sequence[LineageTable], rule: SelectionSpec,
                 epoch: int) -> dict[int, dict[str, float]]:
    """Epochs 1 to ``epoch``: each member's ``by`` at its last generation of the epoch
    (generation a multiple of ``every``), member by member (the members with a numeric
    value there)."""
    found: dict[int, dict[str, float]] = {number: {} for number in range(1, epoch + 1)}
    for lineage in lineages:
        member = lineage.member
        if member is None or member.selection is None:
            continue
        for row in lineage.rows:
            ran_in = member.epoch(row.generation)
            value = _number(row.value(rule.by))
            if (row.generation > 0 and row.generation % rule.every == 0 and value is not None
                    and ran_in in found):
                found[ran_in][lineage.name] = value
    return found


def set_epochs(specs: Sequence[LoadedSpec], table: GenerationTable,
               home: Path | None) -> list[SetEpochs]:
    """Each selected set among ``specs`` (its members after the records, as the fleet
    loads them): its current epoch, living members and values per epoch, from
    ``table`` (those members' rows) and the records under ``home`` (the state dir)."""
    found: list[SetEpochs] = []
    for set_name, rule, members in selected_sets(specs):
        epoch, living = (1, sorted(spec.name for spec in members)) if home is None \
            else current_epoch(members, rule, home)
        mine = [lineage for lineage in table.lineages
                if lineage.member is not None and lineage.member.set_name == set_name]
        found.append(SetEpochs(set_name, rule, epoch, tuple(living),
                               epoch_values(mine, rule, epoch)))
    return found
