"""The command line: parse, call, render, exit code. Thin by rule.

One module per command; each exposes a ``register(app)`` (add it to the list below).
Options more than one command takes are declared once, in ``options``. Typer (in
standalone mode) owns usage errors: an unknown option, a missing argument or a
bad value prints its usage message and exits 2. Every other error that reaches
``main`` is printed as one clear message and never a traceback: an ``OuroError``
as itself (exit 1), anything else as one line naming the exception and how to
see the traceback (``OURO_DEBUG=1``), exit 1.

Start-up is kept light (``ouro --version``, ``ouro validate`` and shell
completion run on every keystroke of a CI job or a shell): command modules
import their heavy dependencies inside the command.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from reconciler.cli import (
    apply,
    doctor,
    history,
    kernel,
    plan,
    schema,
    status,
    validate,
    verify,
    view,
)
from reconciler.errors import OuroError

app = typer.Typer(
    name="ouro",
    help="Declarative lineages of self-modifying programs: plan and apply them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def version_text() -> str:
    """ouro's version, the instrument commit it would record, its kernel fingerprint."""
    from reconciler import __version__
    from reconciler.state import instrument

    try:
        commit = instrument.commit()
    except OuroError as error:  # still a version: say why the commit is unknown
        commit = f"unknown ({error})"
    return (
        f"ouro {__version__}\n"
        f"instrument commit: {commit}\n"
        f"kernel fingerprint: {instrument.fingerprint()}\n"
    )


def _show_version(value: bool) -> None:
    if value:
        sys.stdout.write(version_text())
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            is_eager=True,
            callback=_show_version,
            help="Show ouro's version, instrument commit and kernel fingerprint, and exit.",
        ),
    ] = False,
) -> None:
    """Declarative lineages of self-modifying programs: plan and apply them."""


for _module in (validate, schema, plan, status, apply, verify, doctor, history, view, kernel):
    _module.register(app)


def main() -> None:
    try:
        app()  # standalone: typer prints usage errors and exits with their code
    except OuroError as error:
        from reconciler.report.escape import terminal

        print(terminal(str(error)), file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("ouro: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as error:  # the last line of defence: never a traceback
        if os.environ.get("OURO_DEBUG"):
            raise
        print(
            f"ouro: internal error ({type(error).__name__}: {' '.join(str(error).split())}); "
            "this is a bug in "
            "ouro: rerun with OURO_DEBUG=1 for the traceback and report it",
            file=sys.stderr,
        )
        sys.exit(1)
