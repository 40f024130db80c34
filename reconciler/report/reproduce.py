"""What `ouro reproduce` shows: the verdict, in plain text or its JSON document.

Rule: formats ``engine.reproduce.Reproduction``; decides nothing. Every text an organism
or a record controls (paths, diffs, prompts) goes through ``escape.terminal``.
"""

from __future__ import annotations

import json

from reconciler.engine.reproduce import Reproduction
from reconciler.envelope import envelope
from reconciler.report.escape import json_text, terminal

__all__ = ["reproduce_json", "reproduce_text"]


def _spend(verdict: Reproduction) -> str:
    return (f"spent ${verdict.spend_usd} (the generations spent ${verdict.recorded_spend_usd} "
            f"when they ran; {verdict.replies} recorded repl"
            f"{'y' if verdict.replies == 1 else 'ies'} answered the calls)")


def _divergence_lines(verdict: Reproduction) -> list[str]:
    found = verdict.divergence
    assert found is not None
    lines = [f"{verdict.lineage}: diverged at gen {found.generation} "
             f"({', '.join(found.what)}); reproduced {verdict.reproduced} of "
             f"{verdict.generations} generations before it"]
    if found.outcome is not None:
        lines.append(f"  outcome: recorded {found.outcome[0]}, reproduced {found.outcome[1]}")
    for path in found.paths:
        lines.append(f"  {path.change}: {path.path}")
        lines.extend(f"    {line}" for line in path.diff)
    lines.extend(f"  the organism: {sentence}" for sentence in found.calls)
    return lines


def reproduce_text(verdict: Reproduction) -> str:
    if verdict.status == "refused":
        lines = [f"{verdict.lineage}: cannot be reproduced ({verdict.reason}): "
                 f"{verdict.message}"]
    elif verdict.status == "reproduced":
        lines = [f"reproduced {verdict.reproduced} of {verdict.generations} generations",
                 f"  {verdict.lineage}: {_spend(verdict)}"]
    else:
        lines = [*_divergence_lines(verdict), f"  {_spend(verdict)}"]
    if verdict.kernel:
        lines.append(f"  kernel: {verdict.kernel.get('commit', '')[:12]} "
                     f"({verdict.kernel.get('source')})")
    lines.extend(f"  note: {name} was {item.get('recorded')!r} when the lineage ran, "
                 f"{item.get('now')!r} here" for name, item in verdict.versions.items())
    return terminal("\n".join(lines) + "\n")


def reproduce_json(verdict: Reproduction) -> str:
    return json_text(json.dumps(envelope("ouro-reproduce", **verdict.as_json()), indent=2)
                     ) + "\n"
