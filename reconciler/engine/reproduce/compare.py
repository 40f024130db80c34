"""One reproduced generation against its record: pure, nothing read or written here.

Rule: the same means byte for byte, with one exception stated here and in
docs/reproduce.md: the kernel's own clock. The kernel stamps each journal heading
(``## gen N — … — <time>``) with the time the generation ran, and the organism reads its
journal (the seed puts it in its prompt), so a reproduction's journal and prompts differ
from the record by those stamps alone. They are put back (``Clock.unclocked``): a heading
of generation N that carries the reproduction's stamp of generation N gets the record's.
Nothing else is masked: a time the organism writes itself is a difference, as it should be.

What is compared, in order: the outcome (the observation's ``outcome`` and exit status),
every path of the committed tree (mode and bytes; ``journal.md`` unclocked), and the model
calls (their number, each one's status and prompt: what the organism did differently).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.kernel.base.config import JOURNAL_FILE
from reconciler.kernel.base.formats import DASH, parse_journal

__all__ = ["Clock", "Divergence", "PathDifference", "Side", "compare_generation"]

DIFF_LINES = 12  # of each differing path's unified diff
_SHOWN_BYTES = 1 << 20  # a file larger than this is compared, not diffed
_STAMPED = re.compile(rf"^(?P<head> {{0,3}}##+ gen (?P<n>[1-9][0-9]*) {DASH} .*? {DASH} )"
                      r"(?P<at>[0-9T:+\-.Z]+)$", re.MULTILINE)


@dataclass
class Clock:
    """The kernel's stamps: generation -> its journal heading's time, recorded and now."""

    recorded: dict[int, str] = field(default_factory=dict)
    reproduced: dict[int, str] = field(default_factory=dict)

    def learn(self, recorded_journal: str, reproduced_journal: str) -> None:
        for heading in parse_journal(recorded_journal):
            self.recorded.setdefault(heading.number, heading.timestamp)
        for heading in parse_journal(reproduced_journal):
            self.reproduced.setdefault(heading.number, heading.timestamp)

    def unclocked(self, text: str) -> str:
        """``text`` with each of the reproduction's heading stamps put back to the record's."""
        def back(match: re.Match[str]) -> str:
            number = int(match.group("n"))
            if (self.reproduced.get(number) == match.group("at")
                    and number in self.recorded):
                return match.group("head") + self.recorded[number]
            return match.group(0)

        return _STAMPED.sub(back, text)


@dataclass(frozen=True)
class PathDifference:
    path: str
    change: str  # added | removed | modified | mode
    diff: tuple[str, ...] = ()  # a short unified diff (recorded -> reproduced), or a note

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "change": self.change, "diff": list(self.diff)}


@dataclass(frozen=True)
class Divergence:
    """The first generation that did not come out as recorded, and how."""

    generation: int
    what: tuple[str, ...]  # among: outcome, tree, journal, calls
    outcome: tuple[str, str] | None = None  # (recorded, reproduced) when they differ
    paths: tuple[PathDifference, ...] = ()
    calls: tuple[str, ...] = ()  # what the organism did differently, one sentence each

    def as_json(self) -> dict[str, Any]:
        return {"generation": self.generation, "what": list(self.what),
                "outcome": (None if self.outcome is None else
                            {"recorded": self.outcome[0], "reproduced": self.outcome[1]}),
                "paths": [path.as_json() for path in self.paths], "calls": list(self.calls)}


@dataclass(frozen=True)
class Side:
    """One generation as one history has it: its observation, its tree (path -> mode and
    object id) and a reader of the objects' bytes."""

    observation: Mapping[str, Any]
    files: Mapping[str, tuple[int, str]]
    read: Callable[[str], bytes]


def _text(data: bytes) -> list[str] | None:
    if len(data) > _SHOWN_BYTES or b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def _short_diff(path: str, old: bytes, new: bytes) -> tuple[str, ...]:
    before, after = _text(old), _text(new)
    if before is None or after is None:
        return (f"binary or large: {len(old)} bytes recorded, {len(new)} reproduced",)
    lines = list(difflib.unified_diff(before, after, f"recorded/{path}",
                                      f"reproduced/{path}", n=1, lineterm=""))
    return tuple(lines[:DIFF_LINES] + (["…"] if len(lines) > DIFF_LINES else []))


def _path_differences(recorded: Side, reproduced: Side, clock: Clock) -> list[PathDifference]:
    found: list[PathDifference] = []
    for path in sorted(set(recorded.files) | set(reproduced.files)):
        was, now = recorded.files.get(path), reproduced.files.get(path)
        if was == now:
            continue
        if was is None or now is None:
            data = reproduced.read(now[1]) if now is not None else recorded.read(
                was[1]) if was is not None else b""
            change = "added" if was is None else "removed"
            shown = _short_diff(path, b"" if was is None else data,
                                data if was is None else b"")
            found.append(PathDifference(path, change, shown))
            continue
        old, new = recorded.read(was[1]), reproduced.read(now[1])
        if path == JOURNAL_FILE:
            new = clock.unclocked(new.decode("utf-8", "surrogateescape")).encode(
                "utf-8", "surrogateescape")
        if old != new:
            found.append(PathDifference(path, "modified", _short_diff(path, old, new)))
        elif was[0] != now[0]:
            found.append(PathDifference(path, "mode", (f"mode {was[0]:o} -> {now[0]:o}",)))
    return found


def _calls(observation: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = observation.get("model_calls")
    return [call for call in (found if isinstance(found, list) else [])
            if isinstance(call, dict)]


def call_differences(recorded: Mapping[str, Any], reproduced: Mapping[str, Any],
                     clock: Clock) -> list[str]:
    """What the organism asked differently, one sentence each (empty: the same calls)."""
    was, now = _calls(recorded), _calls(reproduced)
    said: list[str] = []
    if len(was) != len(now):
        said.append(f"it made {len(now)} model call(s); the record has {len(was)}"
                    + (f" (call {len(was) + 1} is not in the record)" if len(now) > len(was)
                       else ""))
    for number, (old, new) in enumerate(zip(was, now, strict=False), 1):
        prompt = clock.unclocked(str(new.get("prompt") or ""))
        if prompt != (old.get("prompt") or ""):
            diff = _short_diff("prompt", str(old.get("prompt") or "").encode(),
                               prompt.encode())
            said.append(f"call {number} asked something else: "
                        + " | ".join(line for line in diff[2:6]))
        elif old.get("http_status") != new.get("http_status"):
            said.append(f"call {number} was answered {new.get('http_status')}; the record "
                        f"says {old.get('http_status')}")
    refused = (recorded.get("model_calls_refused") or 0, reproduced.get("model_calls_refused")
               or 0)
    if refused[0] != refused[1]:
        said.append(f"{refused[1]} request(s) refused past the request ceiling; the record "
                    f"has {refused[0]}")
    return said


def compare_generation(number: int, recorded: Side, reproduced: Side,
                       clock: Clock) -> Divergence | None:
    """None when generation ``number`` came out as recorded, else how it did not."""
    what: list[str] = []
    outcome = None
    was = (recorded.observation.get("outcome"), recorded.observation.get("exit_status"))
    now = (reproduced.observation.get("outcome"), reproduced.observation.get("exit_status"))
    if was != now:
        what.append("outcome")
        outcome = (_outcome_text(*was), _outcome_text(*now))
    paths = _path_differences(recorded, reproduced, clock)
    if any(path.path != JOURNAL_FILE for path in paths):
        what.append("tree")
    if any(path.path == JOURNAL_FILE for path in paths):
        what.append("journal")
    calls = call_differences(recorded.observation, reproduced.observation, clock)
    if calls:
        what.append("calls")
    if not what:
        return None
    return Divergence(number, tuple(what), outcome, tuple(paths), tuple(calls))


def _outcome_text(outcome: Any, exit_status: Any) -> str:
    return f"{outcome} (exit {exit_status})"
