"""Arguments and options more than one command takes, declared once.

Use them as parameter annotations: ``state_dir: StateDir = None``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SpecPaths = Annotated[
    list[Path], typer.Argument(help="spec files or folders (every *.yaml / *.yml under them)")
]
StateDir = Annotated[
    Path | None,
    typer.Option("--state-dir", help="default folder of lineages (else OURO_STATE_DIR, "
                 "else the XDG data home's ouro/lineages)"),
]
Json = Annotated[bool, typer.Option("--json", help="print a versioned JSON document on stdout")]
