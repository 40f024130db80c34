"""CLI: `ouro doctor [PATH...]`: can this host run generations, and how."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer


def doctor_command(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="spec files or folders: also check their providers' API key variables")] = None,
) -> None:
    """Check bubblewrap, Emacs and curl in the sandbox, the ceiling backends, API keys."""
    from reconciler.engine.doctor import ready, run_checks

    variables: list[tuple[str, str]] = []
    if paths:
        from reconciler.spec.load import load_specs

        for spec in load_specs(paths):
            variable = spec.model().api_key_env
            if variable:
                variables.append((spec.name, variable))
    checks = run_checks(variables)
    for check in checks:
        mark = "ok " if check.ok else ("-- " if not check.required else "NO ")
        print(f"{mark} {check.name}: {check.detail}")
        if not check.ok and check.remedy:
            print(f"    remedy: {check.remedy}")
    verdict = ready(checks)
    print("ready: this host can run generations" if verdict
          else "not ready: fix the lines marked NO", file=sys.stderr)
    raise SystemExit(0 if verdict else 1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)
