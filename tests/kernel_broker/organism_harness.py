"""Run an organism with real Emacs outside any sandbox, against a real broker.

The organism's two path variables are pre-set with ``--eval`` (its ``defvar``s
keep an existing value), so ``/kernel`` and ``/work`` become test directories;
the broker writes the manifest with the same kernel directory as its view.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from reconciler.kernel.base.config import Ceilings, ModelConfig, constraints_manifest
from reconciler.kernel.broker.door import Broker, BrokerReport

EMACS = shutil.which("emacs") or "/usr/bin/emacs"


def elisp_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class Life:
    exit_status: int
    stderr: str
    report: BrokerReport
    manifest: str


def live(*, work: Path, kernel: Path, private: Path, model: ModelConfig, journal: str = "",
         generation: int = 1, replay_cursor: int = 0, start_broker: bool = True,
         ceilings: Ceilings | None = None, timeout: float = 120, then: str = "") -> Life:
    """One life: broker up, `emacs -Q --batch -l organism.el`, broker down; ``then``: Emacs
    Lisp evaluated after the load, in the same Emacs."""
    kernel.mkdir(parents=True, exist_ok=True)
    (kernel / "journal.md").write_text(journal, encoding="utf-8")
    constraints = constraints_manifest(ceilings or Ceilings(), model)
    broker = None
    if start_broker:
        broker = Broker.start(kernel_dir=kernel, private_dir=private, model=model,
                              constraints=constraints, api_key=None, generation=generation,
                              replay_cursor=replay_cursor, kernel_view=str(kernel))
    setup = (f"(setq organism-manifest-file {elisp_string(str(kernel / 'capabilities.json'))}"
             f" organism-work-directory {elisp_string(str(work) + '/')})")
    try:
        process = subprocess.run(
            [EMACS, "-Q", "--batch", "--eval", setup, "-l", str(work / "organism.el"),
             *(["--eval", then] if then else [])],
            cwd=work, capture_output=True, timeout=timeout,
            env={"HOME": str(work), "PATH": "/usr/bin:/bin"},
        )
        manifest = (kernel / "capabilities.json").read_text() if start_broker else ""
    finally:
        report = broker.stop() if broker else BrokerReport([], Decimal(0))
    return Life(process.returncode, process.stderr.decode("utf-8", "replace"), report, manifest)


def defvar_value(source: Path, name: str) -> Any:
    """The initial value of ``(defvar NAME VALUE ...)`` in an Emacs Lisp file, read by Emacs."""
    program = (
        f'(with-temp-buffer (insert-file-contents {elisp_string(str(source))})'
        " (goto-char (point-min))"
        " (let (form) (while (setq form (ignore-errors (read (current-buffer))))"
        f"  (when (and (eq (car-safe form) 'defvar) (eq (nth 1 form) '{name}))"
        "    (princ (nth 2 form))))))"
    )
    result = subprocess.run([EMACS, "-Q", "--batch", "--eval", program], capture_output=True,
                            check=True, timeout=60)
    return result.stdout.decode("utf-8")
