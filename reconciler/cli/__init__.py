"""The command line: parse, call, render, exit code. Thin by rule.

One module per command group; each exposes a ``register(app)``. Every error
that reaches ``main`` is printed as one clear message: never a traceback
(``OURO_DEBUG=1`` shows one for ouro's developers).
"""

from __future__ import annotations

import os
import sys

import typer

from reconciler.cli import apply, doctor, plan, validate, verify
from reconciler.errors import OuroError

app = typer.Typer(
    name="ouro",
    help="Declarative lineages of self-modifying programs: plan and apply them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in (validate, plan, apply, verify, doctor):
    _module.register(app)


def main() -> None:
    try:
        code = app(standalone_mode=False)  # a typer.Exit comes back as its exit code
        sys.exit(code if isinstance(code, int) else 0)
    except OuroError as error:
        print(str(error), file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("ouro: interrupted", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as error:  # the last line of defence: never a traceback
        import click

        if isinstance(error, click.exceptions.Exit):
            sys.exit(error.exit_code)
        if isinstance(error, click.ClickException):
            error.show()
            sys.exit(error.exit_code)
        if isinstance(error, click.exceptions.Abort):
            print("ouro: aborted", file=sys.stderr)
            sys.exit(1)
        if os.environ.get("OURO_DEBUG"):
            raise
        print(
            f"ouro: internal error ({type(error).__name__}): {error}\n"
            "  this is a bug in ouro; rerun with OURO_DEBUG=1 for the traceback and report it",
            file=sys.stderr,
        )
        sys.exit(1)
