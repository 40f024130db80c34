"""The fleet: the one owner of "load the specs, find where each lineage lives, observe, plan".

Rule: in the spirit of pyinfra's ``State``, one ``Fleet`` per command holds what every
step of that pipeline shares, and composes the steps the same way for every caller
(the apply session, the engine under each lineage's lock, both executors, and the
commands plan, status, log, show, diff, export and kernel):

- the state dir (``--state-dir``, else ``reconciler.statedir``'s rule), the instrument's
  identity (this ouro, read once), the kernel store and the provider preflight;
- ``specs(paths, select)``: the specs, loaded and selected; a bad selector is one error
  naming the command;
- ``where(spec)``: where a lineage lives now: its places, and the branches its records
  name (``reconciler.state.branches``). It is the only answer, read afresh each time
  (under a lineage's lock, the branches as they are then); ``lock(spec)`` is the
  lineage's lock over the same places;
- ``observe``, ``plan_one`` (one lineage: its kernel chosen from the store, its provider
  preflighted), ``plan`` (every lineage; a set's orphans beside it) and ``status``.

Reads only: the kernel store is written by ``reconciler.engine.kernel_store_writer``,
lineages by the kernel. Heavy modules are imported where they are used, so that a
command pays only for what it asks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from reconciler.errors import OuroError

if TYPE_CHECKING:
    from reconciler.engine.locks import LineageLock
    from reconciler.engine.set_epochs import SetEpochs
    from reconciler.engine.sets import Shown
    from reconciler.kernel.base.config import Identity, LineagePaths
    from reconciler.plan import LineagePlan, Plan
    from reconciler.plan.kernel_choice import KernelChoice
    from reconciler.plan.planner import Orphan, Preflight
    from reconciler.plan.probes import UntilStop
    from reconciler.spec.load import LoadedSpec
    from reconciler.spec.sets import Membership
    from reconciler.state.branches import DeclaredSpec
    from reconciler.state.conditions import ControllerStatus, LineageConditions
    from reconciler.state.fleet import Lineage
    from reconciler.state.forks import ForkSource
    from reconciler.state.kernel_store import KernelFacts, KernelStore
    from reconciler.state.observe import Observed
    from reconciler.state.status import StatusReport
    from reconciler.state.summaries import LineageSummary
    from reconciler.state.table import GenerationTable

__all__ = ["Fleet", "StatusLine"]


class _Selectable(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


_Chosen = TypeVar("_Chosen", bound=_Selectable)
_R = TypeVar("_R")


@dataclass(frozen=True)
class StatusLine:
    """One lineage as ``ouro status`` shows it (``reconciler.report.render`` renders it)."""

    name: str
    report: StatusReport
    paths: LineagePaths | None = None  # where it lives
    labels: Mapping[str, str] = field(default_factory=dict)
    running: str | None = None  # "running in apply pid N on HOST, generation K"
    kernel: KernelChoice | None = None  # the kernel that would extend it
    until: UntilStop | None = None  # its spec's spec.until holds: apply runs no more
    member: Membership | None = None  # where it sits in its set (None: not in a set)
    conditions: LineageConditions | None = None  # what `ouro controller` last wrote of it

    def places(self) -> dict[str, str] | None:
        if self.paths is None:
            return None
        return {"worktree": str(self.paths.worktree), "git_dir": str(self.paths.git_dir),
                "observations": str(self.paths.observations)}


@dataclass(frozen=True)
class _Named:
    """A lineage status shows, with the labels its spec gives it (none without a spec)."""

    name: str
    paths: LineagePaths
    labels: Mapping[str, str]
    spec: LoadedSpec | None = None  # its spec, when status was given specs
    member: Membership | None = None  # where it sits in its set (None: not in one)


class Fleet:
    """The lineages one command looks at, and what it needs to look at them."""

    def __init__(self, state_dir: Path | None = None, *, command: str = "ouro",
                 identity: Identity | None = None, store: KernelStore | None = None,
                 preflight: Preflight | bool | None = True, cached: bool = False) -> None:
        """``state_dir``: as given (``--state-dir``; None: the default); ``command``: the
        name errors start with; ``identity``: the instrument plans are made under (None:
        this ouro's); ``preflight``: True for the provider preflight (False: none);
        ``cached``: observe through the summaries' cache (``state.observed_cache``: a
        lineage whose refs have not moved is not read again), for the commands that only
        read (plan, status); apply observes afresh."""
        self.given_state_dir = state_dir
        self.command = command
        self._identity = identity
        self._store = store
        self._preflight = preflight
        self._cached = cached
        self._cache_dir: Path | None = None

    # ------------------------------------------------------------------ what it holds

    @property
    def state_dir(self) -> Path:
        """The state dir: ``--state-dir``, else the default (``reconciler.statedir``)."""
        from reconciler.statedir import state_dir

        return state_dir(self.given_state_dir)

    @property
    def identity(self) -> Identity:
        """The instrument plans are made under: this ouro's, read once."""
        if self._identity is None:
            from reconciler.state import instrument

            self._identity = instrument.current()
        return self._identity

    @property
    def store(self) -> KernelStore:
        """The kernel store: ``OURO_KERNEL_STORE``, else ``<state dir>/.kernels``."""
        if self._store is None:
            from reconciler.engine.kernel_store_writer import default_store

            self._store = default_store(self.given_state_dir)
        return self._store

    @property
    def preflight(self) -> Preflight | None:
        """Why a provider could not be served here (``state.preflight``), or None."""
        if self._preflight is True:
            from reconciler.state.preflight import provider_problem

            return provider_problem
        return self._preflight or None

    # ------------------------------------------------------------------ specs and places

    def load(self, paths: Sequence[Path]) -> list[LoadedSpec]:
        """Every spec under ``paths`` (``SpecError`` lists every problem)."""
        from reconciler.engine.epochs import expand
        from reconciler.spec.fork_parents import state_dir_or_none
        from reconciler.spec.load import load_specs

        loaded = load_specs(paths, state_dir=self.given_state_dir)
        loaded = expand(loaded, state_dir_or_none(self.given_state_dir))  # selected sets' epochs
        if any(spec.recorded_dir is not None for spec in loaded):
            from reconciler.engine.recorded import fill

            fill(loaded, lambda name: self._lineage_named(name, loaded))
        return loaded

    def _lineage_named(self, name: str, specs: Sequence[LoadedSpec]) -> LineagePaths | None:
        """Where lineage ``name`` lives: a spec of this run's, else ``<state dir>/NAME``;
        None when there is none."""
        from reconciler.errors import StateError
        from reconciler.state.fleet import find_lineages

        for spec in specs:
            if spec.name == name:
                return self.where(spec)
        try:
            return find_lineages([name], [], self.given_state_dir)[0].paths
        except StateError:
            return None

    def select(self, found: Iterable[_Chosen], select: Sequence[str] | None) -> list[_Chosen]:
        """Those ``select`` names or whose labels it selects (all when empty); a bad
        selector is one error, naming the command."""
        from reconciler.spec.select import SelectorError, parse
        from reconciler.spec.select import select as choose

        try:
            return choose(list(found), [parse(text) for text in select or ()])
        except SelectorError as error:
            raise self.error(str(error)) from None

    def specs(self, paths: Sequence[Path], select: Sequence[str] | None = ()
              ) -> list[LoadedSpec]:
        """The specs under ``paths`` that ``select`` chooses."""
        return self.select(self.load(paths), select)

    def error(self, message: str) -> OuroError:
        """An error of this command (``ouro apply`` errors are ``ApplyError``)."""
        from reconciler.errors import ApplyError

        text = f"{self.command}: {message}"
        return ApplyError(text) if self.command == "ouro apply" else OuroError(text)

    def where(self, spec: DeclaredSpec) -> LineagePaths:
        """Where ``spec``'s lineage (or a fork's parent) lives now: the only answer (see
        the module rule)."""
        from reconciler.state.branches import spec_paths

        return spec_paths(spec)

    def lock(self, spec: LoadedSpec, timeout: float) -> LineageLock:
        """The lineage's lock, over its three places (the branches are read under it)."""
        from reconciler.engine.locks import LineageLock

        places = spec.paths()
        return LineageLock(spec.name, places.git_dir, timeout=timeout,
                           places=(places.worktree, places.git_dir, places.observations))

    def lineages(self, names: Sequence[str], specs: Sequence[Path]) -> list[Lineage]:
        """Each named lineage, through ``specs`` or in the state dir; a name that is not
        there is an error naming the remedy."""
        from reconciler.state.fleet import find_lineages

        return find_lineages(names, specs, self.given_state_dir)

    def every_lineage(self, specs: Sequence[Path] = ()) -> list[Lineage]:
        """The state dir's lineages, then those of ``specs`` stored elsewhere (once each)."""
        from reconciler.state.fleet import fleet

        found: list[Lineage] = []
        seen: set[Path] = set()
        for item in [*fleet([], self.given_state_dir),
                     *(fleet(specs, self.given_state_dir) if specs else [])]:
            if Path(item.paths.git_dir) not in seen:
                seen.add(Path(item.paths.git_dir))
                found.append(item)
        return found

    # ------------------------------------------------------------------ observe and plan

    def observe(self, spec: LoadedSpec, at: LineagePaths | None = None) -> Observed:
        """What ``spec``'s lineage is now, where it lives now (``at``: where that was just
        found, under the lineage's lock; else ``where``'s answer, found in the same pass
        as the observation: ``state.observe.observe_spec``)."""
        from reconciler.state.observe import observe, observe_spec

        if at is None:
            return observe_spec(spec, self.cache_dir())[1]
        return observe(at, self.cache_dir())

    def cache_dir(self) -> Path | None:
        """The summaries' folder observe keeps its records in, when this fleet is
        ``cached`` (checked once: refused if others can write it)."""
        if self._cached and self._cache_dir is None:
            from reconciler.state.fleet import summary_cache_dir

            self._cache_dir = summary_cache_dir(self.given_state_dir)
        return self._cache_dir

    def kernel_facts(self, spec: LoadedSpec, observed: Observed,
                     fork: ForkSource | None = None) -> KernelFacts | None:
        """What the planner needs to choose the lineage's kernel (a fork to be born under
        its parent's kernel: that kernel's, from ``fork``)."""
        from reconciler.engine.kernel_store_writer import facts_for

        return facts_for(spec, observed, self.identity, self.store, fork)

    def fork_source(self, spec: LoadedSpec, observed: Observed) -> ForkSource | None:
        """The parent generation a fork yet to be born starts from (``engine.forks``)."""
        if spec.fork is None:
            return None
        from reconciler.engine.forks import fork_source

        return fork_source(spec, observed)

    def plan_one(self, spec: LoadedSpec, observed: Observed | None = None) -> LineagePlan:
        """One lineage's plan: its kernel chosen, its provider preflighted, a fork's source
        read."""
        from reconciler.plan import planner

        seen = self.observe(spec) if observed is None else observed
        fork = self.fork_source(spec, seen)
        planned = planner.plan_lineage(spec, seen, self.identity, preflight=self.preflight,
                                       kernel=self.kernel_facts(spec, seen, fork), fork=fork)
        if spec.recorded_dir is None:
            return planned
        from reconciler.engine.recorded import remaining_note

        note = remaining_note(spec, seen.last_observation)
        return dataclasses.replace(planned, notes=(*planned.notes, note)) if note else planned

    def plan(self, specs: Sequence[LoadedSpec], *,
             observed: Mapping[str, Observed] | None = None,
             orphans: Sequence[Orphan] = ()) -> Plan:
        """Every lineage's plan (``observed``: already observed, by name; else each lineage
        is observed and planned in one pass: ``plan_all``)."""
        from reconciler.plan.planner import plan_of

        lineages = (self.plan_all(specs) if observed is None
                    else [self.plan_one(spec, observed[spec.name]) for spec in specs])
        return plan_of(lineages, self.identity, orphans)

    def plan_all(self, specs: Sequence[LoadedSpec]) -> list[LineagePlan]:
        """Every spec's lineage observed and planned in one pass (``_one_pass``); what every
        lineage's plan shares (the instrument, the kernel store) read first, once, before
        a child could read it again."""
        self.identity  # noqa: B018
        self.store  # noqa: B018
        return self._one_pass(self.plan_one, specs)

    def observe_all(self, specs: Sequence[LoadedSpec]) -> dict[str, Observed]:
        """Every spec's lineage, observed in one pass (``_one_pass``)."""
        seen = self._one_pass(self.observe, specs)
        return {spec.name: found for spec, found in zip(specs, seen, strict=True)}

    def _one_pass(self, function: Callable[[LoadedSpec], _R],
                  specs: Sequence[LoadedSpec]) -> list[_R]:
        """``function`` of every spec, in order, as one pass: the caches' seal read once,
        a large fleet's halves at once, on two cores (``engine.halves``)."""
        from reconciler.engine.halves import map_halves
        from reconciler.state.cachefile import one_seal

        with one_seal(self.cache_dir()):
            return map_halves(function, specs)

    def plan_paths(self, paths: Sequence[Path], select: Sequence[str] | None = ()
                   ) -> tuple[Plan, list[LoadedSpec]]:
        """``ouro plan``: the plan of the specs under ``paths`` that ``select`` chooses, the
        orphans of their sets beside them; and those specs."""
        from reconciler.engine.sets import set_orphans

        loaded = self.load(paths)
        specs = self.select(loaded, select)
        self.cache_dir()  # (refused here, if others can write it)
        plan = self.plan(specs, orphans=set_orphans(loaded, specs, self.given_state_dir))
        return plan, specs

    # ------------------------------------------------------------------ status and history

    def chosen(self, arguments: Sequence[str | Path], specs: Sequence[Path] = (),
               select: Sequence[str] | None = (), names: Sequence[str] = ()) -> list[Shown]:
        """The lineages a reading command's arguments (spec paths, lineage and set names),
        ``names`` (names only), ``--specs`` and ``--select`` name: the one answer
        (``reconciler.engine.chosen``)."""
        from reconciler.engine.chosen import choose

        return choose(arguments, names=names, specs=specs, select_texts=select,
                      state_dir=self.given_state_dir, command=self.command)

    def status(self, arguments: Sequence[str | Path] | None, select: Sequence[str] | None = ()
               ) -> tuple[list[StatusLine], ControllerStatus | None, list[SetEpochs]]:
        """``ouro status``: the lineages its arguments name (``chosen``: each set's together,
        cell by cell, with its orphans, as plan shows them), or every lineage in the state
        dir; what a controller of the state dir last wrote (None: none); and each selected
        set's epochs (``reconciler.engine.set_epochs``; with its spec only)."""
        from reconciler.state.cachefile import one_seal
        from reconciler.state.fleet import summary_cache_dir
        from reconciler.state.observe import observe
        from reconciler.state.status import read_status

        found = [_Named(item.name, item.paths, item.spec.labels if item.spec else {},
                        item.spec, item.member)
                 for item in self.chosen(arguments or (), (), select)]
        from reconciler.state.conditions import read_status as read_conditions

        controller = read_conditions(self.state_dir)
        known = controller.lineages if controller is not None else {}
        cache = summary_cache_dir(self.given_state_dir)
        self.store  # noqa: B018  (refused here, once, if others can write it)
        lines = []
        with one_seal(cache):
            for named in found:
                observed = observe(named.paths, cache)
                lines.append(StatusLine(named.name, read_status(named.paths, observed, cache),
                                        paths=named.paths, labels=named.labels,
                                        running=observed.running,
                                        kernel=self.kernel_of(named.name, observed),
                                        until=_until(named, observed), member=named.member,
                                        conditions=known.get(named.name)))
            epochs = self._epochs(found, cache)
        return lines, controller, epochs

    def _epochs(self, found: Sequence[_Named], cache: Path | None) -> list[SetEpochs]:
        """The selected sets' epochs among ``found`` (their members' table: read only for
        a selected set's members, and only with their spec)."""
        from reconciler.engine.set_epochs import set_epochs
        from reconciler.spec.fork_parents import state_dir_or_none
        from reconciler.state.summaries import summarize
        from reconciler.state.table import GenerationTable, lineage_table

        chosen = [named for named in found if named.spec is not None
                  and named.member is not None and named.member.selection is not None]
        if not chosen:
            return []
        table = GenerationTable(tuple(
            lineage_table(named.name, named.paths, summarize(named.paths, cache),
                          member=named.member, spec=named.spec) for named in chosen))
        return set_epochs([named.spec for named in chosen if named.spec is not None], table,
                          state_dir_or_none(self.given_state_dir))

    def kernel_of(self, name: str, observed: Observed) -> KernelChoice | None:
        """The kernel that would extend an existing lineage; None when there is no lineage,
        or when this ouro cannot tell which instrument it is."""
        from reconciler.errors import InstrumentError
        from reconciler.kernel.base.config import ENTRY_REQUEST_SCHEMA
        from reconciler.plan.kernel_choice import choose
        from reconciler.state.kernel_store import gather

        if not observed.any_exists or not observed.lineage_metadata:
            return None
        try:
            running = self.identity
        except InstrumentError:
            return None
        facts = gather(observed.lineage_metadata, running, ENTRY_REQUEST_SCHEMA, self.store)
        return choose(name, facts) if facts is not None else None

    def summaries(self, names: Sequence[str], specs: Sequence[Path]
                  ) -> list[tuple[LineagePaths, LineageSummary]]:
        """Each named lineage's places and summary (cached, incremental)."""
        from reconciler.state.fleet import summary_cache_dir
        from reconciler.state.summaries import summarize

        cache = summary_cache_dir(self.given_state_dir)
        return [(found.paths, summarize(found.paths, cache))
                for found in self.lineages(names, specs)]

    def named_summaries(self, names: Sequence[str], specs: Sequence[Path],
                        select: Sequence[str] | None = ()
                        ) -> list[tuple[Shown, LineageSummary]]:
        """Each name's lineage, or a set's members and orphans, cell by cell, those
        ``select`` chooses (``chosen``), each with its summary."""
        from reconciler.state.fleet import summary_cache_dir
        from reconciler.state.summaries import summarize

        cache = summary_cache_dir(self.given_state_dir)
        return [(found, summarize(found.paths, cache))
                for found in self.chosen((), specs, select, names)]

    def table(self, names: Sequence[str], specs: Sequence[Path],
              select: Sequence[str] | None = ()) -> GenerationTable:
        """The per-generation table (``reconciler.state.table``) of each name's lineage, or
        of a set's members and orphans, cell by cell (``named_summaries``): each row joined
        with its set place, its descent (a fork's ancestors found among these lineages,
        then the state dir's and the specs') and its probes' measurements."""
        from reconciler.state.table import GenerationTable, lineage_table

        named = self.named_summaries(names, specs, select)
        known: dict[str, LineagePaths] = {}

        def places(name: str) -> LineagePaths | None:
            if not known:
                known.update({item.name: item.paths for item in self.every_lineage(specs)})
                known.update({shown.name: shown.paths for shown, _summary in named})
            return known.get(name)
        return GenerationTable(tuple(
            lineage_table(shown.name, shown.paths, summary, member=shown.member,
                          spec=shown.spec, places=places)
            for shown, summary in named))

    def table_and_stops(self, names: Sequence[str], specs: Sequence[Path],
                        select: Sequence[str] | None = ()
                        ) -> tuple[GenerationTable, dict[str, UntilStop | None]]:
        """``table`` and each lineage's ``spec.until`` stop that holds, as ``status``
        shows it (with a spec only: it needs the spec): ``ouro log``'s one call."""
        from functools import partial

        from reconciler.plan.planner import shown_until
        from reconciler.state.probes import metrics

        table = self.table(names, specs, select)
        return table, {lineage.name: None if lineage.spec is None else shown_until(
            lineage.spec, partial(metrics, lineage.paths), lineage.summary.generations)
            for lineage in table.lineages}

    def known_needs(self, specs: Sequence[Path]) -> dict[str, list[str]]:
        """{kernel fingerprint: [lineage names]} of the state dir's and the specs' lineages."""
        from reconciler.state.observe import observe

        found: dict[str, list[str]] = {}
        for item in self.every_lineage(specs):
            meta = observe(item.paths).lineage_metadata or {}
            fingerprint = meta.get("instrument_fingerprint")
            if isinstance(fingerprint, str):
                found.setdefault(fingerprint, []).append(item.name)
        return found

    def recorded_repository(self, commit: str, specs: Sequence[Path]) -> str | None:
        """The ``instrument_repository`` a known lineage born under ``commit`` records."""
        from reconciler.state.observe import observe

        for item in self.every_lineage(specs):
            meta = observe(item.paths).lineage_metadata or {}
            born, repository = meta.get("instrument_commit"), meta.get("instrument_repository")
            if (isinstance(born, str) and isinstance(repository, str) and len(commit) >= 7
                    and born.startswith(commit.lower())):
                return repository
        return None


def _until(named: _Named, observed: Observed) -> UntilStop | None:
    """The spec's ``until`` condition that holds (as plan decides it), with a spec only."""
    from reconciler.plan.planner import shown_until

    if named.spec is None:
        return None
    return shown_until(named.spec, lambda: observed.probe_metrics, observed.generations)
