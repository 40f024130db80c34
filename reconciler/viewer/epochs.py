"""A selected LineageSet on its set page: its epochs, fitness over epochs, family tree
and (MAP-Elites) its grid. Read-only.

Rule: nothing is decided here. Each epoch's decision is its record
(``reconciler.engine.epochs.read_record``, on ``selection/<set>/e<epoch>`` of its
candidates' observation repositories), shown as written: kept, stopped (``not-selected``)
and born (a fork of whom, at which generation), with the values it read. The fitness of
an epoch is the rule's ``by`` at each member's last generation of it, from the one
per-generation table (``reconciler.engine.set_epochs.epoch_values``, what ``ouro
status`` counts); its count, best, mean and 95% CI are
``reconciler.report.epoch_fitness``' (as ``ouro status`` shows them: the same bootstrap
as `ouro compare`, each epoch a group). The family tree is drawn from the records: the
set's own members are its roots, each born member under its parent; a member a decision stopped is
marked ``stopped``. A MAP-Elites grid places each candidate of a decision in its bin
(``reconciler.plan.selection.map_elites.bin_of``, the decision's own function) and names
each bin's elite. Drawn as SVG by matplotlib (``reconciler.viewer.plots``' figure):
the best line is the SVG group ``fitness-best``, the mean ``fitness-mean``, its band
``fitness-ci``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.epochs import read_record
from reconciler.engine.set_epochs import epoch_values
from reconciler.kernel.base.config import LineagePaths
from reconciler.plan.selection import Candidate
from reconciler.plan.selection.map_elites import bin_of
from reconciler.report.epoch_fitness import EpochFitness, epoch_fitness
from reconciler.spec.selection import SelectionSpec
from reconciler.state.table import LineageTable
from reconciler.viewer import plots

__all__ = ["EpochView", "Member", "Node", "SelectionView", "render_fitness_svg",
           "selection_view"]


@dataclass(frozen=True)
class Member:
    """A member of the selected set as the page reads it."""

    name: str
    paths: LineagePaths
    table: LineageTable
    born_epoch: int
    stopped_at: int | None  # the epoch whose decision stopped it (None: living)


@dataclass(frozen=True)
class EpochView:
    """One epoch: its fitness (n, best, mean and its 95% CI) and, once decided, its
    decision as recorded."""

    epoch: int
    fitness: EpochFitness
    record: Mapping[str, Any] | None = None  # the decision at its end (None: not yet)
    grid: tuple[tuple[str, str, float | None], ...] = ()  # MAP-Elites: bin, elite, value

    @property
    def kept(self) -> list[str]:
        return _names(self.record, "kept")

    @property
    def stopped(self) -> list[str]:
        return _names(self.record, "stopped")

    @property
    def born(self) -> list[tuple[str, str, int]]:
        """(name, parent, the parent's generation) of each member born of it."""
        found = self.record.get("born") if self.record else None
        return [(str(b.get("name")), str(b.get("parent")), int(b.get("generation", 0)))
                for b in found if isinstance(b, dict)] if isinstance(found, list) else []


@dataclass
class Node:
    """A member in the family tree: its children are the members born of it."""

    name: str
    epoch: int  # the epoch it was born into
    stopped_at: int | None
    parent_generation: int | None = None
    children: list[Node] = field(default_factory=list)


@dataclass(frozen=True)
class SelectionView:
    rule: SelectionSpec
    current: int  # the current epoch (every one before it decided)
    epochs: tuple[EpochView, ...]
    roots: tuple[Node, ...]


def _names(record: Mapping[str, Any] | None, key: str) -> list[str]:
    found = record.get(key) if record else None
    return [str(name) for name in found] if isinstance(found, list) else []


def _record(set_name: str, members: Sequence[Member], epoch: int) -> dict[str, Any] | None:
    """The decision at the end of ``epoch``, from the first candidate that holds it."""
    for member in members:
        if member.born_epoch <= epoch and (member.stopped_at is None
                                           or member.stopped_at >= epoch):
            found = read_record(member.paths, set_name, epoch)
            if found is not None:
                return found
    return None


def _grid(rule: SelectionSpec, record: Mapping[str, Any]) -> tuple[tuple[str, str,
                                                                         float | None], ...]:
    """Each occupied bin of a MAP-Elites decision, its elite (the member it kept there)
    and the elite's value of ``by``."""
    shown, kept = record.get("candidates"), set(_names(record, "kept"))
    if rule.map_elites is None or not isinstance(shown, dict):
        return ()
    values = record.get("values") if isinstance(record.get("values"), dict) else {}
    found: dict[tuple[int, ...], tuple[str, float | None]] = {}
    for name, facts in shown.items():
        candidate = Candidate(str(name), 0, facts.get("values", {}) if isinstance(
            facts, dict) else {})
        if name in kept and all(candidate.value(d.by) is not None
                                for d in rule.map_elites.descriptors):
            value = values.get(name) if isinstance(values, dict) else None
            found[bin_of(candidate, rule)] = (str(name), value if isinstance(
                value, int | float) else None)
    return tuple((", ".join(map(str, where)), name, value)
                 for where, (name, value) in sorted(found.items()))


def _tree(members: Sequence[Member], epochs: Sequence[EpochView]) -> tuple[Node, ...]:
    nodes = {m.name: Node(m.name, m.born_epoch, m.stopped_at) for m in members}
    placed: set[str] = set()
    for view in epochs:
        for name, parent, generation in view.born:
            if name in nodes and parent in nodes and name not in placed:
                nodes[name].parent_generation = generation
                nodes[parent].children.append(nodes[name])
                placed.add(name)
    return tuple(node for name, node in nodes.items() if name not in placed)


def selection_view(set_name: str, rule: SelectionSpec,
                   members: Sequence[Member]) -> SelectionView:
    """The selected set ``set_name`` as its page shows it (the module rule)."""
    records: dict[int, dict[str, Any]] = {}
    for epoch in range(1, rule.epochs):
        found = _record(set_name, members, epoch)
        if found is None:
            break
        records[epoch] = found
    current = len(records) + 1
    fitness = {one.epoch: one for one in epoch_fitness(
        epoch_values([m.table for m in members], rule, current), rule.lowest)}
    epochs = tuple(EpochView(epoch, fitness[epoch], record=records.get(epoch),
                             grid=_grid(rule, records[epoch]) if epoch in records else ())
                   for epoch in range(1, current + 1))
    return SelectionView(rule, current, epochs, _tree(members, epochs))


def render_fitness_svg(view: SelectionView) -> bytes:
    """The fitness over epochs: the best, the mean and its 95% CI band, per epoch."""
    title = f"{view.rule.by} over epochs: best, mean and 95% CI".replace("$", r"\$")
    with plots._LOCK:
        figure, axes = plots._figure()
        measured = [e.fitness for e in view.epochs if e.fitness.mean is not None]
        numbers = [e.epoch for e in measured]
        if measured:
            axes.plot(numbers, [e.best for e in measured], marker="o", linewidth=1.2,
                      label="best", gid="fitness-best")
            axes.plot(numbers, [e.mean for e in measured], marker=".", linewidth=1.2,
                      label="mean", gid="fitness-mean")
            banded = [e for e in measured if e.ci_low is not None and e.ci_high is not None]
            if banded:
                axes.fill_between([e.epoch for e in banded], [e.ci_low for e in banded],
                                  [e.ci_high for e in banded], alpha=0.2, gid="fitness-ci",
                                  label="95% CI of the mean")
        else:
            plots._no_data(axes)
        axes.set_xticks(range(1, max(1, view.current) + 1))
        figure_bytes = plots._finish(figure, axes, plots.Plot("fitness", title, "value", ()),
                                     max(1, view.current), bool(measured))
    return figure_bytes


def as_context(view: SelectionView) -> dict[str, Any]:
    """The template's view of it (numbers as text)."""
    def text(value: float | None) -> str:
        return "—" if value is None or not math.isfinite(value) else f"{value:.4g}"

    return {
        "rule": view.rule, "current": view.current,
        "epochs": [{"epoch": e.epoch, "n": e.fitness.measured, "best": text(e.fitness.best),
                    "mean": text(e.fitness.mean),
                    "ci": "—" if e.fitness.ci_low is None or e.fitness.ci_high is None
                    else f"[{text(e.fitness.ci_low)}, {text(e.fitness.ci_high)}]",
                    "decided": e.record is not None, "kept": e.kept, "stopped": e.stopped,
                    "born": e.born, "grid": [(where, name, text(value))
                                             for where, name, value in e.grid]}
                   for e in view.epochs],
        "roots": view.roots,
    }
