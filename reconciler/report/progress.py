"""What apply shows while it runs: a live rich table on a terminal, plain lines elsewhere.

Both reporters are thread-safe: lineages report from their own worker threads.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TextIO

from reconciler.report.escape import rich_text, terminal
from reconciler.report.words import plural

if TYPE_CHECKING:  # rich only for the live table (a terminal): plain lines start faster
    from rich.console import Console
    from rich.table import Table

    from reconciler.engine.apply import LineageResult


# Where a lineage's refusal, stop or errors are said in full (the progress names it)
APPLY_SUMMARY = "apply's summary (on stdout, at the end)"
CONTROLLER_STATUS = "`ouro status` (the lineage's conditions)"


class PlainReporter:
    """One line per event, for logs and CI. ``told``: where the reasons are said in full
    (``APPLY_SUMMARY``; the controller, which prints no summary: ``CONTROLLER_STATUS``)."""

    def __init__(self, stream: TextIO | None = None, *, told: str = APPLY_SUMMARY) -> None:
        self.stream = stream or sys.stderr
        self.told = told
        self._mutex = threading.Lock()

    def _say(self, text: str) -> None:
        with self._mutex:
            print(terminal(text), file=self.stream, flush=True)

    def lineage_started(self, name: str, done: int, desired: int) -> None:
        self._say(f"{name}: {done} of {plural(desired, 'generation')}; running {desired - done}")

    def generation_started(self, name: str, number: int, desired: int) -> None:
        self._say(f"{name}: gen {number} of {desired} ...")

    def generation_finished(self, name: str, number: int, outcome: str, spend: Decimal) -> None:
        self._say(f"{name}: gen {number}: {outcome} (${spend})")

    def model_retry(self, name: str, number: int, event: dict[str, Any]) -> None:
        what = event.get("http_status") or event.get("error") or "failed"
        wait = event.get("wait_seconds")
        seconds = f"{wait:.0f} s" if isinstance(wait, int | float) and wait >= 1 else (
            f"{wait:.1f} s" if isinstance(wait, int | float) else "a moment")
        self._say(f"{name}: gen {number}: {what}, retry in {seconds} "
                  f"({event.get('attempt')}/{event.get('of')})")

    def lineage_finished(self, result: LineageResult) -> None:
        """One line per lineage as it ends; its refusal and errors are said once, where
        ``told`` names (pointed to here, not repeated)."""
        if result.refusals or result.refusal:
            reasons = ", ".join(r.reason for r in result.refusals) or "a refusal"
            self._say(f"{result.name}: refused ({reasons}); {self.told} says why")
        if result.stopped:
            self._say(f"{result.name}: stopped ({result.stopped}); {self.told} says why")
        elif result.errors:
            self._say(f"{result.name}: {plural(len(result.errors), 'error')}; {self.told} "
                      "says what")
        if result.generations_run:
            counts = ", ".join(f"{n} {k}" for k, n in sorted(result.outcomes.items()))
            self._say(
                f"{result.name}: ran {result.generations_run} ({counts}), spent ${result.spend_usd}"
            )

    def note(self, message: str) -> None:
        self._say(message)

    def close(self) -> None:
        pass


class SilentReporter(PlainReporter):
    """For --json: the report at the end is the whole output."""

    def _say(self, text: str) -> None:
        del text


@dataclass
class _Row:
    desired: int
    done: int
    running: int | None = None
    outcomes: dict[str, int] = field(default_factory=dict)
    spend: Decimal = Decimal(0)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    state: str = "waiting"


class LiveReporter(PlainReporter):
    """A live table on a terminal: per lineage, generation k of N, outcomes, spend, elapsed."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        super().__init__()
        self.console = console or Console(stderr=True)
        self.rows: dict[str, _Row] = {}
        self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def _table(self) -> Table:
        from rich.table import Table

        table = Table(box=None, pad_edge=False)
        for column in ("lineage", "generation", "outcomes", "spend", "elapsed", "state"):
            table.add_column(column)
        for name, row in self.rows.items():
            end = row.finished or time.monotonic()
            generation = f"{row.running or row.done} of {row.desired}"
            outcomes = " ".join(f"{k} {v}" for k, v in sorted(row.outcomes.items())) or "-"
            table.add_row(
                rich_text(name), generation, rich_text(outcomes), f"${row.spend}",
                f"{end - row.started:.0f}s", row.state
            )
        return table

    def _refresh(self) -> None:
        self.live.update(self._table())

    def _say(self, text: str) -> None:
        with self._mutex:
            self.live.console.print(rich_text(text))

    def lineage_started(self, name: str, done: int, desired: int) -> None:
        with self._mutex:
            self.rows[name] = _Row(desired=desired, done=done, state="running")
            self._refresh()

    def generation_started(self, name: str, number: int, desired: int) -> None:
        with self._mutex:
            self.rows.setdefault(name, _Row(desired=desired, done=number - 1)).running = number
            self._refresh()

    def generation_finished(self, name: str, number: int, outcome: str, spend: Decimal) -> None:
        with self._mutex:
            row = self.rows[name]
            row.done, row.running = number, None
            status = outcome.split(" ")[0]
            row.outcomes[status] = row.outcomes.get(status, 0) + 1
            row.spend += spend
            self._refresh()

    def lineage_finished(self, result: LineageResult) -> None:
        with self._mutex:
            row = self.rows.setdefault(
                result.name,
                _Row(desired=result.desired_generations, done=result.final_generations or 0),
            )
            row.finished = time.monotonic()
            row.state = (
                "refused"
                if result.refusal
                else "error"
                if result.errors
                else result.final_action or "done"
            )
            self._refresh()
        super().lineage_finished(result)

    def close(self) -> None:
        self.live.stop()
