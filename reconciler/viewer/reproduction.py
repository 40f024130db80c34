"""What the lineage page says of the lineage's last reproduction, as plain data.

Rule: reads nothing itself: ``state.reproduction_record.load`` gives the kept verdict
(``ouro reproduce`` keeps it), this module only words it, as `ouro reproduce` does:
"reproduced N of N generations", or the first divergence (its generation, what differs,
the differing paths with their short diffs, what the organism did differently), or the
refusal. When the lineage has grown or moved since (``Kept.current`` False) the page says
the verdict is about an older head. The verdict's texts come from the organism's tree
and prompts: the template escapes them (autoescape), and each is bounded here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.state.reproduction_record import Kept

__all__ = ["ReproductionView", "reproduction_view"]

PATHS_SHOWN = 20  # differing paths listed; the rest counted
TEXT_CHARS = 2000  # of any one text of the verdict (a path, a diff line, a message)


@dataclass(frozen=True)
class PathShown:
    change: str
    path: str
    diff: tuple[str, ...]


@dataclass(frozen=True)
class ReproductionView:
    status: str  # reproduced | diverged | refused (the page's CSS class)
    headline: str
    ran_at: str | None  # when it was run (UTC), when the record says
    current: bool  # both heads are where the reproduction read them
    heads: tuple[str, str]  # the lineage and observation heads it read
    generation: int | None = None  # the divergence's generation (a link on the page)
    lines: tuple[str, ...] = ()  # outcome and the organism's calls, one sentence each
    paths: tuple[PathShown, ...] = ()
    paths_more: int = 0


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + "…"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _paths(found: list[Any]) -> tuple[PathShown, ...]:
    shown = []
    for item in found[:PATHS_SHOWN]:
        if isinstance(item, dict):
            diff = item.get("diff")
            shown.append(PathShown(_text(item.get("change")), _text(item.get("path")),
                                   tuple(_text(line) for line in diff[:50])
                                   if isinstance(diff, list) else ()))
    return tuple(shown)


def _diverged(verdict: dict[str, Any], base: dict[str, Any]) -> ReproductionView:
    found = verdict.get("divergence")
    found = found if isinstance(found, dict) else {}
    generation = _count(found.get("generation"))
    what = found.get("what")
    what_text = ", ".join(_text(item) for item in what) if isinstance(what, list) else ""
    headline = (f"diverged at generation {generation} ({what_text}): reproduced "
                f"{_count(verdict.get('reproduced'))} of {_count(verdict.get('generations'))}"
                " generations before it")
    lines = []
    outcome = found.get("outcome")
    if isinstance(outcome, dict):
        lines.append(f"outcome: recorded {_text(outcome.get('recorded'))}, reproduced "
                     f"{_text(outcome.get('reproduced'))}")
    calls = found.get("calls")
    lines += [f"the organism: {_text(sentence)}"
              for sentence in (calls[:PATHS_SHOWN] if isinstance(calls, list) else [])]
    paths = found.get("paths")
    paths = paths if isinstance(paths, list) else []
    return ReproductionView("diverged", headline, generation=generation or None,
                            lines=tuple(lines), paths=_paths(paths),
                            paths_more=max(0, len(paths) - PATHS_SHOWN), **base)


def reproduction_view(kept: Kept | None) -> ReproductionView | None:
    """The page's words for ``kept`` (None: never reproduced, or no record this state dir
    sealed)."""
    if kept is None:
        return None
    verdict = kept.verdict
    base: dict[str, Any] = {"ran_at": kept.ran_at, "current": kept.current,
                            "heads": (kept.lineage_head, kept.observation_head)}
    status = verdict.get("status")
    if status == "diverged":
        return _diverged(verdict, base)
    if status == "reproduced":
        return ReproductionView("reproduced", f"reproduced {_count(verdict.get('reproduced'))} "
                                f"of {_count(verdict.get('generations'))} generations", **base)
    return ReproductionView("refused", f"cannot be reproduced ({_text(verdict.get('reason'))}):"
                            f" {_text(verdict.get('message'))}", **base)
