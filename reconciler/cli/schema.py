"""CLI: `ouro schema`: print the spec's JSON Schema (the committed schema.json)."""

from __future__ import annotations

import sys

import typer


def schema_command() -> None:
    """Print the JSON Schema of a spec document (the committed schema.json)."""
    from reconciler.report.schema import schema_text

    sys.stdout.write(schema_text())


def register(app: typer.Typer) -> None:
    app.command("schema",
                short_help='Print the JSON Schema of a spec (schema.json).')(schema_command)
