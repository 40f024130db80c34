"""CLI: `ouro validate PATH...` and `ouro schema`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.errors import SpecError
from reconciler.spec import json_schema
from reconciler.spec.load import load_specs


def schema_text() -> str:
    """The JSON Schema exactly as committed in schema.json (stable order, final newline)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def validate(
    paths: Annotated[
        list[Path], typer.Argument(help="spec files or folders (every *.yaml/*.yml below)")
    ],
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", help="where lineages live by default (else OURO_STATE_DIR)"),
    ] = None,
) -> None:
    """Load and check specs: exit 0 when all are valid, 1 with every problem on stderr."""
    try:
        loaded = load_specs(paths, state_dir=state_dir)
    except SpecError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        files = len({problem.file for problem in error.problems})
        count = len(error.problems)
        print(
            f"ouro validate: {count} problem{'s' * (count != 1)} in {files} "
            f"file{'s' * (files != 1)}",
            file=sys.stderr,
        )
        raise typer.Exit(1) from None
    files = len({spec.file for spec in loaded})
    names = ", ".join(spec.name for spec in loaded)
    print(
        f"ok: {len(loaded)} lineage{'s' * (len(loaded) != 1)} in {files} "
        f"file{'s' * (files != 1)}: {names}"
    )


def schema() -> None:
    """Print the JSON Schema of a spec document (the committed schema.json)."""
    sys.stdout.write(schema_text())


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("schema")(schema)
