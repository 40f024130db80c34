"""What one reproduction found: data only, with its JSON form.

Rule: ``status`` is one of ``reproduced`` (every generation asked for came out as
recorded), ``diverged`` (``divergence`` is the first that did not) or ``refused`` (nothing
was run: ``reason`` and ``message`` say why). The exit code is the verdict's: 0
reproduced, 1 otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from reconciler.engine.reproduce.compare import Divergence

__all__ = ["Reproduction", "Status"]

Status = Literal["reproduced", "diverged", "refused"]


@dataclass(frozen=True)
class Reproduction:
    lineage: str
    status: Status
    generations: int  # asked for: 1..generations
    reproduced: int = 0  # came out as recorded, from generation 1 on
    reason: str | None = None  # a refusal's code
    message: str | None = None  # a refusal's words, with the remedy
    divergence: Divergence | None = None
    kernel: dict[str, Any] | None = None  # the kernel that ran it: commit, fingerprint, source
    recorded_spend_usd: str = "0"  # what generations 1..generations spent when they ran
    spend_usd: str = "0"  # what the reproduction spent (replayed replies: nothing)
    replies: int = 0  # recorded replies it was answered with
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)  # recorded != now
    heads: tuple[str, str] | None = None  # lineage and observation heads read

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "reproduced" else 1

    def as_json(self) -> dict[str, Any]:
        return {
            "lineage": self.lineage, "status": self.status, "generations": self.generations,
            "reproduced": self.reproduced, "reason": self.reason, "message": self.message,
            "divergence": self.divergence.as_json() if self.divergence else None,
            "kernel": self.kernel, "recorded_spend_usd": self.recorded_spend_usd,
            "spend_usd": self.spend_usd, "replies": self.replies, "versions": self.versions,
            "heads": (None if self.heads is None else
                      {"lineage": self.heads[0], "observations": self.heads[1]}),
        }
