"""The state dir: the folder where a fleet's lineages live by default, and ouro keeps its own.

Rule: one answer, here: ``--state-dir`` when given, else ``OURO_STATE_DIR``, else
``$XDG_DATA_HOME/ouro/lineages`` (an absolute ``XDG_DATA_HOME`` only), else
``~/.local/share/ouro/lineages``; always absolute, ``~`` expanded. Beside the
lineages it holds ouro's own folders (``.kernels``, ``.summaries``, ``.audits``,
``slurm-jobs``) and ``events.jsonl``. The loader places a spec without
``spec.storage.path`` in it; a command's fleet (``reconciler.engine.fleet``) resolves it
for everything else.

May import nothing of reconciler: every layer above the kernel asks here.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["STATE_DIR_ENV", "state_dir"]

STATE_DIR_ENV = "OURO_STATE_DIR"


def state_dir(explicit: Path | None = None) -> Path:
    """Where lineages live by default: ``--state-dir``, ``OURO_STATE_DIR``, XDG data home."""
    if explicit is not None:
        base = Path(explicit)
    elif os.environ.get(STATE_DIR_ENV):
        base = Path(os.environ[STATE_DIR_ENV])
    else:
        xdg = os.environ.get("XDG_DATA_HOME", "")
        data_home = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local/share"
        base = data_home / "ouro" / "lineages"
    return Path(os.path.abspath(base.expanduser()))
