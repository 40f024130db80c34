"""The on-disk text formats of a lineage: commit subjects, journal entries, file names.

Trusted harness; pure functions, no I/O. The kernel writes with the ``format_*``
functions; every reader (observe, verify) parses with the ``parse_*`` ones, so
the two can never drift apart. Readers also accept the older instrument's
spellings (``changed +A/-D``, ``died (exit RC); reverted``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal

Status = Literal["changed", "no-change", "died"]
DASH = "\u2014"  # the em dash of journal headings

GENERATION_PREFIX = "gen "
SEED_SUBJECT = "seed"
EXTERNAL_EDIT_SUBJECT = "external edit"

_SUBJECT = re.compile(r"\Agen (?P<n>[1-9][0-9]*): (?P<rest>.*)\Z", re.DOTALL)
_HEADING = re.compile(
    rf"\A## gen (?P<n>[1-9][0-9]*) {DASH} (?P<status>changed|no-change|died)"
    rf"(?: {DASH} (?P<detail>.*?))? {DASH} (?P<at>[0-9T:+\-.Z]+)\Z"
)
# The older instrument's heading: "## gen 2 — changed +197/-43 — <timestamp>".
_OLD_HEADING_DETAIL = re.compile(
    rf"\A## gen (?P<n>[1-9][0-9]*) {DASH} changed (?P<detail>\+\d+/-\d+) {DASH} (?P<at>\S+)\Z"
)


@dataclass(frozen=True)
class Change:
    """What a successful generation changed; ``None`` counts mean no change at all."""

    organism_added: int = 0
    organism_deleted: int = 0
    organism_changed: bool = False
    paths: int = 0

    @property
    def status(self) -> Status:
        return "changed" if self.paths else "no-change"

    @property
    def detail(self) -> str | None:
        """The journal/outcome detail after ``changed — ``; None for no-change."""
        if not self.paths:
            return None
        if self.organism_changed:
            return f"organism +{self.organism_added}/-{self.organism_deleted}; {self.paths} paths"
        return f"organism unchanged; {self.paths} other paths"


# ---------------------------------------------------------------- lineage commits


def subject_changed(n: int, change: Change, note: str | None = None) -> str:
    """``note`` (e.g. ``model unavailable (401)``) annotates a no-change only."""
    if not change.paths:
        return subject_no_change(n, note)
    if change.organism_changed:
        return (
            f"gen {n}: changed (organism +{change.organism_added}/-{change.organism_deleted}; "
            f"{change.paths} paths)"
        )
    return f"gen {n}: changed (organism unchanged; {change.paths} other paths)"


def subject_no_change(n: int, note: str | None = None) -> str:
    """``gen N: no-change``, or ``gen N: no-change — NOTE`` (readers match the prefix)."""
    return f"gen {n}: no-change {DASH} {note}" if note else f"gen {n}: no-change"


def subject_died(n: int, exit_status: int) -> str:
    return f"gen {n}: died (exit {exit_status}); staged writes discarded"


@dataclass(frozen=True)
class GenerationSubject:
    number: int
    status: Status | None  # None: starts with "gen N: " but the status is not recognised


def is_generation_subject(subject: str) -> bool:
    """Counts toward the generation number: first line starts with ``gen ``."""
    return subject.startswith(GENERATION_PREFIX)


def parse_generation_subject(subject: str) -> GenerationSubject | None:
    """``gen N: <status>...`` -> its number and status; None if not a generation subject."""
    first_line = subject.split("\n", 1)[0]
    match = _SUBJECT.match(first_line)
    if match is None:
        return None
    rest = match.group("rest")
    status: Status | None
    if rest.startswith("changed"):
        status = "changed"
    elif rest.startswith("no-change"):
        status = "no-change"
    elif rest.startswith("died"):
        status = "died"
    else:
        status = None
    return GenerationSubject(int(match.group("n")), status)


# ---------------------------------------------------------------- journal


# The line Emacs starts a batch backtrace with: the death's cause, kept in the entry.
LISP_ERROR_PREFIX = "Debugger entered--Lisp error:"
DEATH_TAIL_LINES = 5
# What the original instrument's reader (its viewer's ``lineage_reader``) takes for an
# entry's heading anywhere in journal.md, fences or not (its ``\s`` spans lines too).
_ORIGINAL_HEADING = re.compile(r"^##\s+gen\s+\d+\s+[\u2014-]", re.MULTILINE)
_GUARD = "   "  # a fence's indentation: CommonMark strips it from every line of the block


def journal_entry(
    n: int,
    status: Status,
    timestamp: str,
    *,
    detail: str | None = None,
    exit_status: int | None = None,
    stderr_lines: list[str] | None = None,
) -> str:
    """One entry, to append to journal.md: starts on a new line after a blank line.

    A death carries its exit code and its stderr's last five lines, preceded by its
    Lisp error line when that is further up (``death_lines``), nothing else, in a
    fence no line of it can close (``death_block``).
    """
    parts = [status] + ([detail] if detail else []) + [timestamp]
    text = f"\n## gen {n} {DASH} " + f" {DASH} ".join(parts) + "\n"
    if status == "died":
        text += f"exit {exit_status}\n" + death_block(death_lines(stderr_lines or []))
    return text


def death_lines(stderr_lines: list[str]) -> list[str]:
    """The stderr lines a death entry keeps: the last five, and before them the last
    ``Debugger entered--Lisp error: ...`` line when it is not among them (physics
    release 2: the original cut it off, so no later life learned why its ancestor died)."""
    tail = stderr_lines[-DEATH_TAIL_LINES:]
    before = stderr_lines[:-DEATH_TAIL_LINES]
    causes = [line for line in before if line.startswith(LISP_ERROR_PREFIX)]
    return causes[-1:] + tail


def death_block(lines: list[str]) -> str:
    """``lines`` verbatim in a fenced block that no Markdown reader can end early.

    The fence is longer than any run of tildes or backticks anywhere in the text, so no
    line (indented up to three spaces or not) closes it in CommonMark. When a line
    would read as an entry heading to the original instrument's reader (which ignores
    fences), the fence and every line are indented three spaces: CommonMark strips them
    again (the block's text is unchanged), and no line starts with ``##`` any more.
    """
    text = "\n".join(lines)
    longest = max((len(run) for run in re.findall(r"~+|`+", text)), default=0)
    fence = "~" * max(3, longest + 1)
    if not _ORIGINAL_HEADING.search(text):
        return "".join(f"{line}\n" for line in [fence, *lines, fence])
    return "".join(f"{_guarded(line)}\n" for line in [fence, *lines, fence])


def _guarded(line: str) -> str:
    """``line`` indented by the guard, and so is every line a CR starts within it (a CR
    is a line ending to CommonMark; one just before the LF belongs to that ending)."""
    body, ending = (line[:-1], "\r") if line.endswith("\r") else (line, "")
    return _GUARD + body.replace("\r", "\r" + _GUARD) + ending


def append_entry(journal: str, entry: str) -> str:
    """Append so that the entry's heading follows a blank line."""
    if journal and not journal.endswith("\n"):
        journal += "\n"
    return journal + entry


@dataclass(frozen=True)
class JournalHeading:
    number: int
    status: Status
    detail: str | None
    timestamp: str
    line: int  # 1-based line number in journal.md


# CommonMark's fenced code block (its opening line; a closing one has no info string)
# and ATX heading, as far as a journal can hold them: up to three spaces of indentation.
_FENCE_OPEN = re.compile(r"\A {0,3}(?P<fence>`{3,}(?=[^`]*\Z)|~{3,})")
_ATX_H2 = re.compile(r"\A {0,3}##(?:[ \t]+(?P<text>.*?))?(?:[ \t]+#+)?[ \t]*\Z")


# A CommonMark line that may open or close a fence, or be a heading: a LF or a CR ends the
# line before it (readers search a journal with a LF put in front, so that its first line
# has one), then up to three spaces. A journal is read by searching from fence to fence,
# so the lines between are never looked at one by one (physics release 4: the last
# heading of 1,000 generations' journal in ~1 ms, not ~20). ``_FENCE_OPEN`` and
# ``_ATX_H2`` stay the definitions; these find their candidates (group 1).
_FENCE_LINE = re.compile(r"[\n\r]( {0,3}(?:`{3}|~{3})[^\r\n]*)")
_HEADING_LINE = re.compile(r"[\n\r]( {0,3}##[^\r\n]*)")


def _heading(text: str, line: int) -> JournalHeading | None:
    match = _HEADING.match(text)
    if match is not None:
        status: Status = match.group("status")  # type: ignore[assignment]
        return JournalHeading(int(match.group("n")), status, match.group("detail"),
                              match.group("at"), line)
    old = _OLD_HEADING_DETAIL.match(text)
    if old is not None:
        return JournalHeading(int(old.group("n")), "changed", old.group("detail"),
                              old.group("at"), line)
    return None


def _outside_fences(body: str) -> Iterator[tuple[int, int]]:
    """The stretches of ``body`` (a journal with a LF in front) outside fenced blocks, as
    (start, end) offsets, in order; each starts at a line ending."""
    position = 0
    while True:
        opened, candidate = None, None
        for candidate in _FENCE_LINE.finditer(body, position):
            opened = _FENCE_OPEN.match(candidate.group(1))
            if opened is not None:
                break
        if opened is None or candidate is None:
            yield position, len(body)
            return
        yield position, candidate.start()
        closed = _closing_line(opened.group("fence")).search(body, candidate.end())
        if closed is None:
            return  # an unclosed block runs to the end
        position = closed.end()


@functools.lru_cache(maxsize=64)
def _closing_line(fence: str) -> re.Pattern[str]:
    """The line that closes a block ``fence`` opened (CommonMark: up to three spaces, the
    same character, at least as many, then only spaces or tabs), as one search; it ends
    where its line ends (at the next line ending)."""
    return re.compile(r"[\n\r] {0,3}" + re.escape(fence) + re.escape(fence[0])
                      + r"*[ \t]*(?=[\r\n]|\Z)")


def _atx_text(line: str) -> str | None:
    """The text of an ATX level-2 heading line, None if it is not one (or has none)."""
    atx = _ATX_H2.match(line)
    return atx.group("text") if atx is not None and atx.group("text") else None


def parse_journal(text: str) -> list[JournalHeading]:
    """Every ``## gen N — status — ...`` heading of a journal, in file order, as a
    CommonMark reader sees them: nothing inside a fenced block (a death's stderr) is a
    heading, and a block ends only where CommonMark ends it. ``line`` counts
    ``\n``-separated lines."""
    body = "\n" + text
    headings: list[JournalHeading] = []
    index, counted = 0, 0  # body's \n-separated line at offset ``counted`` (0: the LF put in)
    for start, end in _outside_fences(body):
        for match in _HEADING_LINE.finditer(body, start, end):
            atx = _atx_text(match.group(1))
            if atx is None:
                continue
            index += body.count("\n", counted, match.end())
            counted = match.end()
            heading = _heading(f"## {atx}", index)
            if heading is not None:
                headings.append(heading)
    return headings


def last_heading_line(text: str) -> str | None:
    """The last ``## gen`` heading line of a journal, verbatim (never one quoted from
    stderr): ``parse_journal``'s last, found from the end (a journal's last heading is
    near its end, so only what follows it is looked at)."""
    body = "\n" + text
    for start, end in reversed(list(_outside_fences(body))):
        found = body.rfind("##", start, end)
        while found > start:  # the CommonMark line that holds it (a LF or a CR ends one)
            begins = max(body.rfind("\n", start, found), body.rfind("\r", start, found)) + 1
            ends = min((at for at in (body.find("\n", found), body.find("\r", found))
                        if at >= 0), default=len(body))
            atx = _atx_text(body[begins:ends])
            if atx is not None and _heading(f"## {atx}", 0) is not None:
                line_end = body.find("\n", found)
                return body[body.rfind("\n", 0, found) + 1:
                            line_end if line_end >= 0 else len(body)]
            found = body.rfind("##", start, found)
    return None


# ---------------------------------------------------------------- file names

# In the observation repository: its metadata, one record per generation in
# generations/NNNN.json, and the model spend of discarded (interrupted) attempts.
OBSERVATION_METADATA_FILE = "metadata.json"
GENERATIONS_DIR = "generations"
INTERRUPTED_DIR = "interrupted"
# In the lineage's git dir while a generation is in flight: its intent marker.
MARKER_FILE = "ouro-generation.json"
MARKER_SCHEMA = "ouro-generation-intent/v1"
# The lineage metadata keys the observation metadata repeats: the instrument it was born
# under; the last three are its physics, which only the same physics may extend.
INSTRUMENT_KEYS = ("instrument_repository", "instrument_ref", "instrument_commit",
                   "instrument_fingerprint", "seed_sha256")
PHYSICS_KEYS = INSTRUMENT_KEYS[2:]


# ---------------------------------------------------------------- observations


def observation_path(n: int) -> str:
    return f"{GENERATIONS_DIR}/{n:04d}.json"


def parse_observation_path(path: str) -> int | None:
    match = re.fullmatch(rf"{GENERATIONS_DIR}/([0-9]{{4,}})\.json", path)
    return int(match.group(1)) if match else None


def outcome_text(status: Status, detail: str | None) -> str:
    """The observation's ``outcome`` for a published generation (journal heading text)."""
    return f"{status} {DASH} {detail}" if detail else status


def observation_subject(n: int, outcome: str) -> str:
    return f"observe: gen {n} {outcome}"


def observation_init_subject(lineage_branch: str) -> str:
    return f"observe: initialize {lineage_branch}"


_OBSERVE_SUBJECT = re.compile(r"\Aobserve: gen (?P<n>[1-9][0-9]*) (?P<outcome>.+)\Z")


def parse_observation_subject(subject: str) -> tuple[int, str] | None:
    match = _OBSERVE_SUBJECT.match(subject.split("\n", 1)[0])
    return (int(match.group("n")), match.group("outcome")) if match else None


DEATH_OUTCOMES = ("process_exit", "signal", "wall_timeout", "cgroup_oom", "decoder_rejection")


def status_of_outcome(outcome: str) -> Status | None:
    """changed / no-change / died, from an observation's ``outcome``."""
    if outcome.startswith("changed"):
        return "changed"
    if outcome == "no-change":
        return "no-change"
    if outcome in DEATH_OUTCOMES:
        return "died"
    return None


# ---------------------------------------------------------------- spend


def usd_amount(value: object) -> Decimal | None:
    """A recorded USD amount: a decimal string or an integer (never a float or a bool),
    finite and not negative; None if ``value`` is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value) if value >= 0 else None
    if not isinstance(value, str):
        return None
    try:
        amount = Decimal(value)
    except InvalidOperation:
        return None
    return amount if amount.is_finite() and amount >= 0 else None


def call_spend(call: object) -> Decimal:
    """What one ``model_calls`` record cost: its ``accounted_usd``; when that is unknown
    (null, absent or not an amount), its ``reserved_usd`` (a request whose usage is
    unknown keeps its worst case); 0 when neither is known. A call flagged
    ``usage_exceeds_request`` costs at most its ``reserved_usd``: a usage no request
    could cost is not spend (a broker before physics release 2 accounted it as
    reported, 10^4000 tokens included)."""
    if not isinstance(call, Mapping):
        return Decimal(0)
    accounted = usd_amount(call.get("accounted_usd"))
    reserved = usd_amount(call.get("reserved_usd"))
    if accounted is None:
        return reserved if reserved is not None else Decimal(0)
    if call.get("usage_exceeds_request") is True and reserved is not None:
        return min(accounted, reserved)
    return accounted


def calls_spend(calls: object) -> Decimal:
    """The spend of a list of ``model_calls`` records: the one spend rule (the kernel's
    outcome, recovery's record of a discarded attempt, status and verify use it)."""
    if not isinstance(calls, list):
        return Decimal(0)
    return sum((call_spend(call) for call in calls), Decimal(0))
