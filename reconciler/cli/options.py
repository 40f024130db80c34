"""Arguments and options more than one command takes, declared once.

Use them as parameter annotations: ``state_dir: StateDir = None``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def _allow_members(value: int | None) -> int | None:
    """``--max-set-members``: the loader's bound on one set, for this process."""
    if value is not None:
        from reconciler.spec.set_members import allow_members

        allow_members(value)
    return value


MaxSetMembers = Annotated[
    int | None,
    typer.Option("--max-set-members", min=1, callback=_allow_members,
                 help="the most members one LineageSet may have (matrix cells x replicas) "
                 "[default: 10000]"),
]
Json = Annotated[bool, typer.Option("--json", help="print a versioned JSON document on stdout")]


def _selectors(values: list[str] | None) -> list[str] | None:
    """A value neither a lineage name nor a label selector is a usage error (exit 2)."""
    from reconciler.spec.select import SelectorError, parse

    for value in values or ():
        try:
            parse(value)
        except SelectorError as error:
            raise typer.BadParameter(str(error).removeprefix(f"--select {value!r}: ")) from None
    return values


Select = Annotated[
    list[str] | None,
    typer.Option("--select", "-l", callback=_selectors,
                 help="only these lineages: a name, or a label selector as in kubectl "
                 "(team=evo,model!=gpt; 'tier in (a,b)'); repeatable, any may match"),
]


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """An option's callback: a value not among ``choices`` is a usage error (exit 2, with the
    usage line), as every other bad value is."""

    def check(value: str) -> str:
        if value not in choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return check
