"""The controller's loop: fetch, adopt a good revision or report a bad one, reconcile, wait.

Rule: level-triggered, as Kubernetes controllers are. Every pass starts from what the
spec repository and the lineages' repositories say now; what the loop keeps in memory
(the revision adopted, what it has already seen settled) is a cache, rebuilt at start:
the last good revision is the one its cache clone has checked out, else the newest commit
of the branch whose specs load (a bad commit is never applied; a revision without any
spec is no bad commit: applied, it orphans every lineage). One pass runs at most an
interval of new generations (with the local executor), so a new commit is picked up
within an interval and a generation. Signals: SIGTERM or SIGINT once lets running
generations finish, then the loop ends; twice stops them (publishing nothing); SIGHUP
re-reads the settings (``reload``) and observes everything again.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any

import pygit2

from reconciler.engine.apply import Reporter
from reconciler.engine.controller import conditions
from reconciler.engine.controller.budget import THRESHOLDS, DailyBudget, recorded_spend, worst_case
from reconciler.engine.controller.lock import ControllerLock
from reconciler.engine.controller.notify import Notifier, NotifySettings
from reconciler.engine.controller.passes import Passes
from reconciler.engine.controller.source import SourceError, SpecSource
from reconciler.engine.fleet import Fleet
from reconciler.errors import OuroError
from reconciler.kernel.base.refusals import REASONS
from reconciler.ownfiles import private_folder
from reconciler.plan.probes import GOAL_STOPS, UntilStop
from reconciler.spec.load import LoadedSpec, default_places
from reconciler.spec.load import state_dir as resolve_state_dir
from reconciler.state import instrument
from reconciler.state.conditions import (
    CONTROLLER_DIR,
    Condition,
    LineageConditions,
    read_status,
)
from reconciler.state.failures import died_streak
from reconciler.state.fleet import summary_cache_dir

__all__ = ["Controller", "ControllerSettings", "newly_done", "newly_refused"]

_LOOK_BACK = 50  # commits searched for the last good revision at start


@dataclass(frozen=True)
class ControllerSettings:
    """What `ouro controller` was asked (one field per option)."""

    repo: str
    branch: str = "main"
    path: str = "specs/"
    interval: float = 60.0
    executor: str = "local"
    parallel: int | None = None
    max_spend_per_day: Decimal | None = None
    notify: NotifySettings = field(default_factory=NotifySettings)
    state_dir: Path | None = None
    death_streak: int = 3  # deaths in a row that make a notification


@dataclass
class _Own:
    """The controller's own condition (its part of the status document)."""

    revision: str | None = None
    seen: str | None = None
    bad_commit: dict[str, str] | None = None
    last_error: dict[str, str] | None = None
    budget: dict[str, Any] | None = None


def newly_refused(before: dict[str, Condition | None],
                  after: dict[str, LineageConditions]) -> list[tuple[str, Condition]]:
    """The lineages whose Stalled condition became a refusal (or another refusal) between
    two passes: each is notified once, not again while it stays refused the same way."""
    found: list[tuple[str, Condition]] = []
    for name, view in after.items():
        was, now = before.get(name), view.get("Stalled")
        if now is not None and now.status == "True" and now.reason in REASONS and (
                was is None or was.status != "True" or was.reason != now.reason):
            found.append((name, now))
    return found


def newly_done(before: dict[str, Condition | None],
               done: dict[str, UntilStop]) -> list[tuple[str, UntilStop]]:
    """The lineages a pass found done by ``spec.until`` (``done``) that were not done
    before it (``before``: each known lineage's Ready condition): a changed spec made the
    condition hold, no generation ran, so no engine event said it. A lineage first seen
    in this pass (a controller without its previous document) is not said."""
    return [(name, stop) for name, stop in done.items() if name in before and (
        (was := before[name]) is None or was.status != "True" or was.reason != "done")]


def _holds_no_spec(where: Path) -> bool:
    """Nothing at ``where``, or a folder (links not followed) with no ``*.yaml`` or
    ``*.yml`` in it: a revision whose every spec was deleted. Anything else is the
    loader's to read or refuse."""
    if not os.path.lexists(where):
        return True
    if os.path.islink(where) or not os.path.isdir(where):
        return False
    return not any(name.endswith((".yaml", ".yml"))
                   for _, folders, files in os.walk(where, followlinks=False)
                   for name in (*folders, *files))


class Controller:
    def __init__(self, settings: ControllerSettings, reporter: Reporter,
                 say: Callable[[str], None],
                 reload: Callable[[], ControllerSettings] | None = None,
                 clock: conditions.Clock = conditions.now) -> None:
        self.settings = settings
        self.clock = clock  # the times it stamps (tests fake it)
        self.reporter, self.say = reporter, say
        self._reload = reload
        self.state = resolve_state_dir(settings.state_dir)
        self.source = SpecSource(settings.repo, settings.branch,
                                 self.state / CONTROLLER_DIR / "cache")
        self.notifier = Notifier(settings.notify, say)
        self.own = _Own()
        self.specs: list[LoadedSpec] = []
        self._folder: Path | None = None  # the adopted revision's checkout
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self._hup = False
        self._failed = False  # an error was said in this tick
        self._tried: str | None = None
        self._streaks: dict[str, int] = {}
        self._crossed: tuple[str, set[Decimal]] = ("", set())
        self._lock = ControllerLock(self.state)
        self.passes: Passes | None = None

    # ------------------------------------------------------------ life

    def run(self) -> int:
        """Hold the state dir's controller lock and loop until SIGTERM; the exit code."""
        try:
            private_folder(self.state, "the state dir")
        except OSError as error:
            raise OuroError(f"ouro controller: cannot create the state dir {self.state} "
                            f"({error.strerror}): name another with --state-dir") from error
        with self._lock, self._signals():
            self.notifier.start()
            previous = read_status(self.state)
            self.passes = Passes(self.state, instrument.current(), self.reporter, self._heard,
                                 views=dict(previous.lineages) if previous else {},
                                 clock=self.clock)
            self.say(f"ouro controller: pid {os.getpid()}: {self.source.url} branch "
                     f"{self.settings.branch}, path {self.settings.path}, every "
                     f"{self.settings.interval:g}s, state dir {self.state}")
            try:
                while not self.stopping.is_set():
                    started = time.monotonic()
                    busy = self.tick()
                    if self._hup:
                        self._reread()
                    elif not busy and not self.stopping.is_set():
                        left = self.settings.interval - (time.monotonic() - started)
                        self.wake.wait(max(0.0, left))
                    self.wake.clear()
            finally:
                self.notifier.close()
        self.say("ouro controller: stopped")
        return 0

    @contextmanager
    def _signals(self) -> Iterator[None]:
        def stop(signum: int, frame: FrameType | None) -> None:
            del frame
            limits = self.passes.limits if self.passes else None
            if self.stopping.is_set() and limits is not None:
                limits.cancel.set()
                self.say("ouro controller: stopping running generations now; they publish "
                         "nothing")
                return
            self.stopping.set()
            if limits is not None:
                limits.stop.set()
            self.say(f"ouro controller: {signal.Signals(signum).name}: finishing running "
                     "generations, then exiting (again to stop them now)")
            self.wake.set()

        def hup(signum: int, frame: FrameType | None) -> None:
            del signum, frame
            self._hup = True
            self.wake.set()

        previous = {number: signal.signal(number, handler) for number, handler in
                    ((signal.SIGTERM, stop), (signal.SIGINT, stop), (signal.SIGHUP, hup))}
        try:
            yield
        finally:
            for number, old in previous.items():
                signal.signal(number, old)

    def _reread(self) -> None:
        self._hup = False
        if self._reload is not None:
            try:
                new = self._reload()
            except OuroError as error:
                self._error(f"SIGHUP: the settings were not re-read: {error}")
                return
            self.notifier.close(timeout=1.0)
            self.notifier = Notifier(new.notify, self.say)
            self.notifier.start()
            if (new.repo, new.branch, new.path) != (self.settings.repo, self.settings.branch,
                                                    self.settings.path):
                self.source = SpecSource(new.repo, new.branch, self.source.cache)
                self._tried = None  # another source: its head is considered afresh
                self.own.revision = None
            self.settings = new
        if self.passes is not None:
            self.passes.forget()
        self.say("ouro controller: SIGHUP: settings re-read; everything is observed again")

    # ------------------------------------------------------------ one tick

    def tick(self) -> bool:
        """Fetch, adopt or report, reconcile once, write the conditions. True when work is
        left that the next pass goes on with at once. A fetch that fails is an error said
        once; the last good revision is reconciled all the same."""
        busy = False
        self._failed = False
        try:
            self._fetch()
            if self.own.revision is not None:
                busy = self._reconcile()
        except OuroError as error:
            self._error(str(error))
        except Exception as error:  # the loop outlives a bug: said, notified, tried again
            if os.environ.get("OURO_DEBUG"):
                raise
            self._error(f"ouro controller: internal error ({type(error).__name__}: "
                        f"{' '.join(str(error).split())}); this is a bug in ouro")
        if not self._failed:
            self.own.last_error = None
        self._write()
        return busy and not self.stopping.is_set()

    def _fetch(self) -> None:
        try:
            head = self.source.fetch()
        except SourceError as error:
            self._error(str(error))
            return
        self.own.seen = head
        if head != self._tried:
            self._tried = head
            self._consider(head)

    def _error(self, message: str) -> None:
        self._failed = True
        same = self.own.last_error is not None and self.own.last_error["message"] == message
        self.own.last_error = {"message": message, "at": self.clock()}
        self.say(message)
        if not same:
            self.notifier.send("controller-error", message, **self._where())

    def _where(self) -> dict[str, Any]:
        return {"controller": {"pid": os.getpid(), "host": socket.gethostname()},
                "revision": self.own.revision}

    # ------------------------------------------------------------ revisions

    def _load(self, folder: Path) -> list[LoadedSpec]:
        """The revision's specs; none (an empty revision, not a bad one) when its path holds
        no spec file at all (every spec deleted: the path is gone, or holds no ``*.yaml``)."""
        where = folder / self.settings.path
        if _holds_no_spec(where):
            return []
        return Fleet(self.settings.state_dir).load([where])

    def _consider(self, head: str) -> None:
        """Adopt ``head`` if its specs load, else report it and keep the last good one."""
        if self.own.revision is None:
            kept = self.source.checked_out()
            if kept is not None:
                self._adopt(kept, quiet=True)
        if head == self.own.revision:
            return
        problem = self._problem(head)
        if problem is None:
            self._adopt(head)
            return
        self._bad(head, problem)
        if self.own.revision is None:  # nothing good yet (a fresh cache): look back
            for commit in self._history(head):
                if self._problem(commit) is None:
                    self._adopt(commit, newest=False)
                    break

    def _problem(self, commit: str) -> str | None:
        folder = self.source.export(commit)
        try:
            self._load(folder)
        except OuroError as error:
            return str(error).replace(f"{folder}/", "").replace(str(folder), ".")
        return None

    def _history(self, head: str) -> list[str]:
        repo = pygit2.Repository(str(self.source.clone_dir))
        found: list[str] = []
        commit = repo[head].peel(pygit2.Commit)
        while commit.parents and len(found) < _LOOK_BACK:
            commit = commit.parents[0]
            found.append(str(commit.id))
        return found

    def _adopt(self, commit: str, *, quiet: bool = False, newest: bool = True) -> None:
        """Check ``commit`` out and load its specs; ``newest``: it is the branch's head,
        so any bad commit reported before it is behind us."""
        revision = self.source.adopt(commit)
        self._folder = revision.folder
        self.specs = self._load(revision.folder)
        self.own.revision = commit
        if newest and not quiet:
            self.own.bad_commit = None
        if not quiet and not self.specs:
            self._empty(commit)
        elif not quiet:
            self.say(f"ouro controller: applying revision {commit[:12]} "
                     f"({len(self.specs)} lineage{'' if len(self.specs) == 1 else 's'})")

    def _empty(self, commit: str) -> None:
        """A revision without specs is applied: every lineage orphaned (kept, none run),
        said and notified once, when it is adopted."""
        text = (f"ouro controller: revision {commit[:12]} of {self.settings.branch} has no "
                f"spec under {self.settings.path}: every lineage is orphaned (kept, none runs) "
                "until a revision adds specs again (or check --path)")
        self.say(text)
        self.notifier.send("no-specs", text, commit=commit, path=self.settings.path,
                           **self._where())

    def _bad(self, commit: str, problem: str) -> None:
        self.own.bad_commit = {"commit": commit, "message": problem, "at": self.clock()}
        kept = (f"still reconciling {self.own.revision[:12]}" if self.own.revision
                else "no good revision yet")
        text = (f"ouro controller: bad commit {commit[:12]} of {self.settings.branch}: "
                f"nothing of it is applied ({kept}):\n{problem}")
        self.say(text)
        self.notifier.send("bad-commit", text, commit=commit, message=problem, **self._where())

    # ------------------------------------------------------------ reconcile

    def _reconcile(self) -> bool:
        assert self.passes is not None
        budget = self._budget()
        before = {name: view.get("Stalled") for name, view in self.passes.views.items()}
        ready = {name: view.get("Ready") for name, view in self.passes.views.items()}
        result = self.passes.run(self.specs, executor=self.settings.executor,
                                 parallel=self.settings.parallel,
                                 interval=self.settings.interval, budget=budget)
        self.passes.limits = None
        if budget is not None:
            self._spent(budget, result.budget_blocked)
        if self._next_epoch():
            return True  # a selected set has a new epoch: the next pass runs it at once
        for name, now in newly_refused(before, self.passes.views):
            self.notifier.send("refused", f"ouro: lineage {name} refused ({now.reason}): "
                               f"{now.message}", lineage=name, reason=now.reason,
                               message=now.message, **self._where())
        for name, stop in newly_done(ready, self.passes.done_by_spec):
            self.notifier.send(
                "target-reached", f"ouro: lineage {name} is done at gen {stop.generation} "
                f"({stop.code}) since its spec changed; no generation ran: {stop.message}",
                lineage=name, generation=stop.generation, reason=stop.code,
                message=stop.message, spec_changed=True, **self._where())
        return result.cut_by_deadline

    def _next_epoch(self) -> bool:
        """Record each selected set's decision that no longer waits (as `ouro apply` does
        between its rounds, docs/selection.md) and load the specs again, whose members
        the records change; True when one was recorded."""
        if self._folder is None or not any(
                spec.member is not None and spec.member.selection is not None
                for spec in self.specs):
            return False
        from reconciler.engine.selection import advance

        where = [self._folder / self.settings.path]
        if not advance(Fleet(self.settings.state_dir, command="ouro controller"), where):
            return False
        self.specs = self._load(self._folder)
        if self.passes is not None:
            self.passes.forget()  # a kept member's target moved, its spec file did not
        self.say("ouro controller: a selected set's epoch ended: its decision is recorded; "
                 "its next epoch runs now")
        return True

    def _budget(self) -> DailyBudget | None:
        limit = self.settings.max_spend_per_day
        if limit is None:
            return None
        day = datetime.now(UTC).date()
        where = Fleet(self.settings.state_dir).where
        spent = recorded_spend([where(s) for s in self.specs], day,
                               summary_cache_dir(self.settings.state_dir))
        worst = max((worst_case(s) for s in self.specs), default=Decimal(0))
        return DailyBudget(limit, spent=spent, worst=worst)

    def _spent(self, budget: DailyBudget, blocked: str | None) -> None:
        day = datetime.now(UTC).date().isoformat()
        if self._crossed[0] != day:
            self._crossed = (day, set())
        crossed = self._crossed[1]
        for share in THRESHOLDS:
            if share not in crossed and budget.spent >= budget.limit * share:
                crossed.add(share)
                self.notifier.send(
                    "spend-threshold", f"ouro controller: the day's spend ${budget.spent} "
                    f"crossed {share * 100:.0f}% of --max-spend-per-day ${budget.limit}",
                    spent_usd=str(budget.spent), limit_usd=str(budget.limit),
                    share=str(share), **self._where())
        was = self.own.budget is not None and self.own.budget.get("blocked") is not None
        if (blocked is None and was and self.own.budget is not None
                and self.own.budget.get("day") == day
                and budget.spent + budget.worst > budget.limit):
            # a pass that started nothing (every lineage settled, or none admitted to
            # try): the day's budget still refuses the next generation
            blocked = budget.message()
        self.own.budget = {"day": day, "spent_usd": str(budget.spent),
                           "limit_usd": str(budget.limit), "blocked": blocked}
        if blocked and not was:
            self.say(f"ouro controller: {blocked}")
            self.notifier.send("budget-exhausted", f"ouro controller: {blocked}",
                               spent_usd=str(budget.spent), limit_usd=str(budget.limit),
                               **self._where())

    # ------------------------------------------------------------ transitions

    def _heard(self, event: str, fields: dict[str, Any]) -> None:
        """The engine's events that are worth a notification (called from its threads)."""
        name = str(fields.get("lineage", ""))
        if event == "generation":
            before = self._streaks.get(name)
            if before is None:  # its first life since this controller started
                before = self._recorded_streak(name, fields.get("generation"))
            streak = before + 1 if fields.get("status") == "died" else 0
            self._streaks[name] = streak
            if streak == self.settings.death_streak:
                self.notifier.send(
                    "death-streak", f"ouro: lineage {name}: {streak} generations died in a "
                    f"row (the newest: gen {fields.get('generation')}, {fields.get('outcome')})",
                    lineage=name, generation=fields.get("generation"), streak=streak,
                    **self._where())
        elif event == "lineage-stopped":
            goal = fields.get("reason") in GOAL_STOPS
            self.notifier.send(
                "target-reached" if goal else "lineage-stopped",
                f"ouro: lineage {name} stopped after gen {fields.get('generation')} "
                f"({fields.get('reason')}): {fields.get('message')}",
                lineage=name, generation=fields.get("generation"),
                reason=fields.get("reason"), message=fields.get("message"), **self._where())

    def _recorded_streak(self, name: str, generation: object) -> int:
        """The deaths in a row just before ``generation``, read from the lineage's
        observations: a restarted controller keeps no memory, the repositories do (a streak
        that spans the restart is notified once, when it reaches the threshold)."""
        spec = next((spec for spec in self.specs if spec.name == name), None)
        if spec is None or not isinstance(generation, int) or generation < 2:
            return 0
        paths = Fleet(self.settings.state_dir).where(spec)
        return died_streak(paths, generation - 1, self.settings.death_streak)

    # ------------------------------------------------------------ the document

    def _orphans(self) -> dict[str, LineageConditions]:
        assert self.passes is not None
        known = {spec.name for spec in self.specs}
        found: dict[str, LineageConditions] = {}
        try:
            names = sorted(os.listdir(self.state))
        except OSError:
            return found
        for name in names:
            if name.startswith(".") or name in known or name.endswith(
                    (".git", ".observations", ".ouro-lock", ".json")):
                continue
            places = default_places(self.state / name, name)
            if places.git_dir.is_dir() and places.observations.is_dir():
                found[name] = conditions.orphaned(name, None, self.passes.views.get(name),
                                                  self.clock)
        return found

    def _write(self) -> None:
        if self.passes is None:
            return
        known = {spec.name for spec in self.specs}
        lineages = {name: view for name, view in self.passes.views.items() if name in known}
        lineages.update(self._orphans())
        self.passes.views.update(lineages)
        own = {"repo": self.source.url, "branch": self.settings.branch,
               "path": self.settings.path, "revision": self.own.revision,
               "seen": self.own.seen, "bad_commit": self.own.bad_commit,
               "last_error": self.own.last_error, "budget": self.own.budget,
               "pid": os.getpid(), "host": socket.gethostname(),
               "started_at": self._lock.started_at, "interval_seconds": self.settings.interval,
               "executor": self.settings.executor}
        try:
            conditions.write(self.state, own, lineages)
        except (OSError, OuroError) as error:
            self.say(f"ouro controller: cannot write its status ({error}): `ouro status` "
                     "shows the previous one")

