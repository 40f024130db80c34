"""The command line: parse, call, render, exit code. Thin by rule.

One module per command; each exposes a ``register(app)`` (add it to the list below).
Options more than one command takes are declared once, in ``options``. Typer (in
standalone mode) owns usage errors: an unknown option, a missing argument or a
bad value prints its usage message and exits 2. Every other error that reaches
``main`` is printed as one clear message and never a traceback: an ``OuroError``
as itself (exit 1), anything else as one line naming the exception and how to
see the traceback (``OURO_DEBUG=1``), exit 1. A full disk, an exhausted quota or a
closed pipe on an output is the host's fault, never a bug: every command flushes its
output before it returns, so that the fault is met while the command can name it
(``errors.HostFault``: what, and the remedy; exit 1), never at the interpreter's exit.

Start-up is kept light (``ouro --version``, ``ouro validate`` and shell
completion run on every keystroke of a CI job or a shell): command modules
import their heavy dependencies inside the command, and ``main`` builds the parser of
the one command its arguments name (``_for``: typer builds every parameter of every
command it is given, which costs more than an in-sync plan's own work). ``app`` is the
whole command line (help, an unknown command, completion, the tests).
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import sys
import threading
from collections.abc import Callable
from typing import Annotated, Any

import typer

from reconciler.cli import (
    apply,
    compare,
    controller,
    doctor,
    history,
    kernel,
    plan,
    reproduce,
    schema,
    status,
    validate,
    verify,
    view,
)
from reconciler.errors import HostFault, OuroError, host_fault


def _typer() -> typer.Typer:
    return typer.Typer(
        name="ouro",
        help="Declarative lineages of self-modifying programs: plan and apply them.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        # Plain help (click's): no `<bool>` after a flag, paragraphs re-wrapped to the
        # terminal, each command's one-line summary whole (its short_help).
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


app = _typer()


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


def _flushed(command: Callable[..., Any]) -> Callable[..., Any]:
    """The command, its output flushed before it returns; a host fault named."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            try:
                return command(*args, **kwargs)
            finally:
                sys.stdout.flush()
        except OSError as error:
            fault = host_fault(error)
            if fault is None:
                raise
            raise fault from error

    return run


def _register(target: typer.Typer) -> None:
    for info in target.registered_commands:
        if info.callback is not None:
            info.callback = _flushed(info.callback)
    for group in target.registered_groups:
        if group.typer_instance is not None:
            _register(group.typer_instance)


for _module in (validate, schema, plan, status, apply, controller, verify, doctor, history, view,
                kernel, compare, reproduce):
    _module.register(app)
_register(app)
_VERSION_OPTIONS = ("--version", "-V")


def _for(args: list[str]) -> typer.Typer:
    """The command line that parses ``args`` as ``app`` does, with only what they can reach:
    the command ``args`` start with, or no command for ``--version`` (its eager callback
    exits before any command is looked at); ``app`` itself for anything else (help lists
    every command, an unknown one is named with its usage)."""
    first = args[0] if args else None
    if first in _VERSION_OPTIONS:
        commands, groups = [], []
    else:
        commands = [info for info in app.registered_commands if info.name == first]
        groups = [group for group in app.registered_groups
                  if group.typer_instance is not None
                  and (group.name or group.typer_instance.info.name) == first]
        if not commands and not groups:
            return app
    narrow = _typer()
    narrow.registered_callback = app.registered_callback
    narrow.registered_commands = commands
    narrow.registered_groups = groups
    return narrow


def _fail(message: str, *, output_broken: bool = False) -> None:
    from reconciler.report.escape import terminal

    print(terminal(message), file=sys.stderr)
    if output_broken:  # what is still buffered for it must not fail again at exit
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), sys.stdout.fileno())
    sys.exit(1)


# The commands that only read and end within seconds. Python's cyclic collector is paused
# while one runs: what they make dies by reference count, and the collector's passes over
# every object a 1,000-lineage plan holds cost about a tenth of it (bench/set_bench.py).
_BRIEF = frozenset({"plan", "status", "validate"})


def console_main() -> None:
    """The ``ouro`` console script: ``main``; then a brief command's process ends as soon as
    its output is flushed and the exit handlers (``atexit``) have run, without the
    interpreter's teardown, which frees every object one by one (for a 1,000-lineage plan,
    about a twentieth of its time: bench/set_bench.py). Any other command, an exit code
    that is not a number, another thread still running (the interpreter would wait for
    it), or an output that cannot be flushed: the interpreter's own exit. Never called
    in-process (the tests call ``main``): it ends the process."""
    try:
        main()
        code: str | int | None = 0
    except SystemExit as done:
        code = 0 if done.code is None else done.code
    if _brief() and type(code) is int and threading.active_count() == 1:
        atexit._run_exitfuncs()  # (run once: they are forgotten once run)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):  # closed or broken: Python's exit says what it says
            sys.exit(code)
        os._exit(code)
    sys.exit(code)


def _brief() -> bool:
    """The command this process runs is one of ``_BRIEF``."""
    return sys.argv[1:2] != [] and sys.argv[1] in _BRIEF


def main() -> None:
    paused = _brief() and gc.isenabled()
    if paused:
        gc.disable()
    try:
        _main()
    finally:
        if paused:  # (main is called in-process too: the tests)
            gc.enable()


def _main() -> None:
    # No pydantic plugins (they observe an application's validation for its own tooling,
    # and finding them reads every installed package's metadata on each start); a value
    # the user set is kept (PYDANTIC_DISABLE_PLUGINS=0 loads them).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")
    try:
        _for(sys.argv[1:])()  # standalone: typer prints usage errors and exits with their code
    except OuroError as error:
        _fail(str(error), output_broken=isinstance(error, HostFault))
    except KeyboardInterrupt:
        print("ouro: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as error:  # the last line of defence: never a traceback
        fault = host_fault(error)
        if fault is not None:
            _fail(str(fault), output_broken=True)
        if os.environ.get("OURO_DEBUG"):
            raise
        print(
            f"ouro: internal error ({type(error).__name__}: {' '.join(str(error).split())}); "
            "this is a bug in "
            "ouro: rerun with OURO_DEBUG=1 for the traceback and report it",
            file=sys.stderr,
        )
        sys.exit(1)
