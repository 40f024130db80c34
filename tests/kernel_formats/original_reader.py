"""The original instrument's lineage reader and its lineage check, transcribed for tests.

From github.com/scottviteri/ouroboros at 922cd18 (MIT). ``viewer/lineage_reader.py``:
its ``JOURNAL_HEADING``, ``LineageReader._journal_entry``, the exit code and stderr
parsing of ``generation_details`` and the journal half of ``verify``, with git
replaced by the journal's text; and, reading the lineage through git as it does
(``verify_lineage``), its ``_read_history`` (the first-parent generation count of
HEAD) and its whole ``verify``. From ``kernel.sh``: the observation half of its
lineage check (``check_observations``: the observation repository's worktree holds
``metadata.json`` of schema ``ouroboros-observations/v1`` and is on the branch it
names). Its regular expressions are copied character for character; it knows
nothing of fences, so whatever starts a line with ``## gen N —`` anywhere in
journal.md is a heading to it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["GENERATION_SUBJECT", "JOURNAL_HEADING", "check_observations", "details", "entry",
           "heading_numbers", "verify", "verify_lineage"]

GENERATION_SUBJECT = re.compile(
    r"^gen\s+(?P<number>\d+):\s+(?P<status>changed|no-change|died)\b"
)

JOURNAL_HEADING = re.compile(
    r"^##\s+gen\s+(?P<number>\d+)\s+[—-]\s+"
    r"(?P<status>changed|no-change|died)\b.*$",
    re.MULTILINE,
)


def entry(journal: str, generation: int) -> dict[str, Any]:
    """``_journal_entry``: the first heading of that number up to the next heading."""
    header = re.compile(
        rf"^##\s+gen\s+{generation}\s+[—-].*$", re.MULTILINE
    ).search(journal)
    if not header:
        return {"found": False, "heading": "", "body": "", "raw": ""}

    following = re.compile(r"^##\s+gen\s+\d+\s+[—-]", re.MULTILINE).search(
        journal, header.end()
    )
    end = following.start() if following else len(journal)
    raw = journal[header.start() : end].strip()
    heading, _, body = raw.partition("\n")
    return {
        "found": True,
        "heading": heading.removeprefix("## ").strip(),
        "body": body.strip(),
        "raw": raw,
    }


def details(journal: str, generation: int) -> tuple[int | None, str]:
    """``generation_details``' reading of an entry: (exit code, stderr tail)."""
    body = entry(journal, generation)["body"]
    exit_match = re.search(r"(?m)^exit\s+(\d+)\s*$", body)
    exit_code = int(exit_match.group(1)) if exit_match else None
    stderr_match = re.search(
        r"(?ms)^~~~[^\n]*\n(.*?)^~~~\s*$", body
    )
    stderr_tail = stderr_match.group(1).rstrip() if stderr_match else ""
    return exit_code, stderr_tail


def heading_numbers(journal: str) -> list[int]:
    """``verify``'s list of the head journal's generation numbers."""
    return [int(match.group("number")) for match in JOURNAL_HEADING.finditer(journal)]


def verify(journal: str, kinds: list[str]) -> list[str]:
    """``verify``'s journal errors for generations 1..N of these kinds (its git half aside)."""
    errors: list[str] = []
    for number, kind in enumerate(kinds, start=1):
        found = entry(journal, number)
        if not found["found"]:
            errors.append(f"generation {number} has no matching journal entry")
            continue
        heading = JOURNAL_HEADING.match(f"## {found['heading']}")
        if not heading:
            errors.append(f"generation {number} has an unparseable journal heading")
        elif heading.group("status") != kind:
            errors.append(f"generation {number} is {kind} in git but "
                          f"{heading.group('status')} in the journal")
    numbers = heading_numbers(journal)
    if numbers != list(range(1, len(kinds) + 1)):
        errors.append(f"HEAD journal generation sequence is {numbers}, "
                      f"expected {list(range(1, len(kinds) + 1))}")
    return errors


ALLOWED_GIT_COMMANDS = frozenset({"log", "show", "diff", "cat-file", "rev-list"})
OBSERVATION_SCHEMA = "ouroboros-observations/v1"


def _git(worktree: Path, git_dir: Path, command: str, *arguments: str) -> str:
    """``LineageRepository._git``: an allowlisted read-only git command (its
    ``GitReadError`` is a ``RuntimeError`` here)."""
    if command not in ALLOWED_GIT_COMMANDS:
        raise AssertionError(f"git command is not read-only allowlisted: {command}")
    environment = os.environ.copy()
    environment.update({"GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat",
                        "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_GLOBAL": os.devnull,
                        "GIT_CONFIG_SYSTEM": os.devnull, "LC_ALL": "C"})
    environment.pop("GIT_EXTERNAL_DIFF", None)
    git = shutil.which("git")
    assert git is not None, "the original's reader needs git"
    completed = subprocess.run(
        [git, f"--git-dir={git_dir}", f"--work-tree={worktree}", "--no-pager", command,
         *arguments], cwd=worktree, env=environment, stdin=subprocess.DEVNULL,
        capture_output=True, timeout=30, check=False)
    if completed.returncode:
        raise RuntimeError(f"git {command} failed: {completed.stderr.decode(errors='replace')}")
    return completed.stdout.decode("utf-8", errors="replace")


def _history(worktree: Path, git_dir: Path) -> list[dict[str, Any]]:
    """``_read_history``: HEAD's first-parent commits, oldest first; a subject starting
    with ``gen `` is the next generation by count."""
    output = _git(worktree, git_dir, "log", "--first-parent", "--reverse",
                  "--format=%H%x1f%P%x1f%aI%x1f%s%x1e", "HEAD")
    commits: list[dict[str, Any]] = []
    count = 0
    for raw in output.split("\x1e"):
        raw = raw.strip("\r\n")
        if not raw:
            continue
        sha, _parents, _date, subject = raw.split("\x1f", 3)
        reported, generation, kind = None, None, "context"
        if subject.startswith("gen "):
            count += 1
            generation = count
            match = GENERATION_SUBJECT.match(subject)
            kind = match.group("status") if match else "generation"
            reported = int(match.group("number")) if match else None
        elif subject == "external edit" or subject.startswith("external edit:"):
            kind = "external"
        elif subject == "seed":
            kind = "seed"
        commits.append({"sha": sha, "subject": subject, "kind": kind,
                        "generation": generation, "reported_generation": reported})
    return commits


def _show(worktree: Path, git_dir: Path, sha: str, path: str) -> str | None:
    try:
        return _git(worktree, git_dir, "show", f"{sha}:{path}")
    except RuntimeError:
        return None


def verify_lineage(worktree: Path, git_dir: Path) -> dict[str, Any]:
    """``LineageRepository.verify`` over the lineage's git dir: its ``valid``,
    ``generation_count`` and ``errors``."""
    commits = _history(worktree, git_dir)
    if not commits:
        raise ValueError("the lineage has no commits reachable from HEAD")
    generations = [c for c in commits if c["generation"] is not None]
    errors: list[str] = []
    for commit in generations:
        if commit["reported_generation"] is None:
            errors.append(f"{commit['sha'][:7]} has an unparseable generation subject")
        elif commit["reported_generation"] != commit["generation"]:
            errors.append(f"{commit['sha'][:7]} reports generation "
                          f"{commit['reported_generation']}, but is generation "
                          f"{commit['generation']} by first-parent count")
        journal = _show(worktree, git_dir, commit["sha"], "journal.md")
        found = (entry(journal, commit["generation"]) if journal is not None
                 else {"found": False})
        if not found["found"]:
            errors.append(f"generation {commit['generation']} has no matching journal entry")
            continue
        heading = JOURNAL_HEADING.match(f"## {found['heading']}")
        if not heading:
            errors.append(f"generation {commit['generation']} has an unparseable journal "
                          "heading")
        elif heading.group("status") != commit["kind"]:
            errors.append(f"generation {commit['generation']} is {commit['kind']} in git but "
                          f"{heading.group('status')} in the journal")
    head_journal = _show(worktree, git_dir, commits[-1]["sha"], "journal.md") or ""
    numbers = heading_numbers(head_journal)
    if numbers != list(range(1, len(generations) + 1)):
        errors.append(f"HEAD journal generation sequence is {numbers}, "
                      f"expected {list(range(1, len(generations) + 1))}")
    return {"valid": not errors, "commit_count": len(commits),
            "generation_count": len(generations), "errors": errors}


def check_observations(observations: Path, lineage_branch: str,
                       observation_branch: str) -> list[str]:
    """``kernel.sh``'s check of the observation repository before a generation (its
    instrument-commit comparison aside): the worktree's metadata.json, of its schema,
    names the branches, and the repository is on the observation branch."""
    if not (observations / ".git").is_dir() or not os.access(observations / "metadata.json",
                                                            os.R_OK):
        return ["kernel: trusted observation repository is missing"]
    try:
        payload = json.loads((observations / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeError, json.JSONDecodeError):
        return ["observation metadata is unreadable"]
    if not isinstance(payload, dict) or payload.get("schema") != OBSERVATION_SCHEMA:
        return ["observation metadata has an unsupported schema"]
    problems = [f"observation metadata has no valid {field}"
                for field in ("lineage_branch", "observation_branch", "instrument_commit")
                if not isinstance(payload.get(field), str)]
    current = subprocess.run(["git", "-C", str(observations), "branch", "--show-current"],
                             capture_output=True, text=True, check=False).stdout.strip()
    if current != payload.get("observation_branch") or current != observation_branch:
        problems.append("kernel: observation repository is on the wrong branch")
    if payload.get("lineage_branch") != lineage_branch:
        problems.append(f"kernel: lineage repository is on {lineage_branch}, expected "
                        f"{payload.get('lineage_branch')}")
    return problems
