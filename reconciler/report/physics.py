"""Which kernel ran a generation, as text and JSON for `ouro show`. Pure; no I/O.

The facts come from ``reconciler.state.ran_with``; every text in them may be
hostile (``ouro show`` makes the whole output inert for a terminal).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from reconciler.state.ran_with import NOT_RECORDED, BornUnder, KernelRun, differs

__all__ = ["kernel_json", "kernel_lines"]


def _short(value: str | None) -> str:
    return "—" if value is None else value[:12]


def kernel_lines(run: KernelRun, born: BornUnder | None, observed: bool) -> list[str]:
    """The "## kernel" section of ``ouro show``."""
    out = ["## kernel (the physics that ran it)"]
    if not observed:
        out.append("ran with: not recorded (no observation of this generation)")
    elif run.status == NOT_RECORDED:
        out.append("ran with: not recorded (written by the original instrument or an ouro "
                   "from before pinned kernels)")
    else:
        if run.problem is not None:
            out.append(f"ran with: malformed: {run.problem}")
        entry = f" ({run.package}, {run.entry})" if run.package else ""
        versions = "; ".join(f"{key} {value or '—'}" for key, value in run.versions) or "—"
        out += [
            f"kernel {_short(run.commit)} fingerprint {run.fingerprint or '—'}",
            f"source {run.source or '—'}{entry}",
            f"control plane: ouro {run.ouro_version or '—'} at {_short(run.ouro_commit)}",
            f"versions: {versions}",
        ]
    if born is not None and born.fingerprint is not None:
        out.append(f"born under {_short(born.commit)} fingerprint {born.fingerprint}")
    else:
        out.append("born under: not recorded")
    how = differs(born, run.commit, run.fingerprint)
    if how is not None:
        out.append(f"DIFFERS: this generation's kernel {how} is not the one its lineage was "
                   "born under (not written by ouro's pinned kernel: a foreign write)")
    return out


def kernel_json(run: KernelRun, born: BornUnder | None, observed: bool) -> dict[str, Any]:
    """``ouro show --json``'s ``kernel``: as read, the born-under kernel, and how they differ."""
    ran = asdict(run)
    ran["versions"] = {key: value for key, value in run.versions}
    if not observed:
        ran["status"] = NOT_RECORDED
    return {"ran_with": ran, "born_under": asdict(born) if born is not None else None,
            "differs": differs(born, run.commit, run.fingerprint)}
