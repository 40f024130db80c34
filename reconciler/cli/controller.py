"""CLI: `ouro controller`: reconcile a spec repository's branch continuously (GitOps).

Parse the options into ``ControllerSettings``, hold the state dir's controller lock and
run ``engine.controller.loop.Controller`` until SIGTERM (docs/controller.md). Everything
it says goes to stderr, one line per thing (a service's log); ``ouro status`` shows its
conditions. ``--settings FILE`` names a YAML file of the same options (their long names,
e.g. ``interval: 30s``), read at start and again on SIGHUP; an option given on the
command line wins over the file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from reconciler.cli.apply import ExecutorOption, _money
from reconciler.cli.options import MaxSetMembers, StateDir
from reconciler.errors import OuroError

if TYPE_CHECKING:
    from reconciler.engine.controller.loop import ControllerSettings

_FILE_KEYS = ("repo", "branch", "path", "interval", "executor", "parallel",
              "max-spend-per-day", "notify", "notify-command")


def _seconds(text: str, where: str) -> float:
    from reconciler.spec.units import parse_duration

    try:
        value = float(parse_duration(text))
    except (ValueError, TypeError) as error:
        raise typer.BadParameter(f"{text!r}: {error} (e.g. 30s, 5m)", param_hint=where) from error
    if value <= 0:
        raise typer.BadParameter(f"{text!r} is not a positive duration", param_hint=where)
    return value


def _from_file(path: Path | None) -> dict[str, Any]:
    """The settings file's options (``OuroError`` naming the file and the key if bad)."""
    if path is None:
        return {}
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(path.read_text())
    except (OSError, YAMLError) as error:
        raise OuroError(f"ouro controller: cannot read --settings {path} ({error}): "
                        "fix the file (YAML: option names to values)") from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise OuroError(f"ouro controller: --settings {path}: expected a mapping of option "
                        f"names ({', '.join(_FILE_KEYS)}) to values")
    unknown = sorted(str(key) for key in data if key not in _FILE_KEYS)
    if unknown:
        raise OuroError(f"ouro controller: --settings {path}: unknown option "
                        f"{', '.join(unknown)} (known: {', '.join(_FILE_KEYS)})")
    return {str(key): None if value is None else str(value) for key, value in data.items()}


def _settings(given: dict[str, Any], file: Path | None,
              state_dir: Path | None) -> ControllerSettings:
    from reconciler.engine.controller.loop import ControllerSettings
    from reconciler.engine.controller.notify import NotifySettings

    merged = {**_from_file(file), **{k: v for k, v in given.items() if v is not None}}
    if not merged.get("repo"):
        raise typer.BadParameter("name the spec repository (a path or a URL)",
                                 param_hint="--repo")
    executor = merged.get("executor", "local")
    if executor not in ("local", "slurm"):
        raise typer.BadParameter(f"{executor!r} is not one of local, slurm",
                                 param_hint="--executor")
    if executor != "local" and merged.get("max-spend-per-day") is not None:
        raise typer.BadParameter(
            "--max-spend-per-day admits each generation as it starts on this host; with "
            f"--executor {executor} a job runs its lineage's missing generations on its "
            "own: leave it out (or bound each job with spec.model.budget_usd and "
            "spec.generations)", param_hint="--executor")
    parallel = merged.get("parallel")
    if parallel is not None and (not str(parallel).isdigit() or int(parallel) < 1):
        raise typer.BadParameter(f"{parallel!r} is not a count of 1 or more",
                                 param_hint="--parallel")
    return ControllerSettings(
        repo=str(merged["repo"]), branch=str(merged.get("branch", "main")),
        path=str(merged.get("path", "specs/")),
        interval=_seconds(str(merged.get("interval", "60s")), "--interval"),
        executor=executor, parallel=int(parallel) if parallel is not None else None,
        max_spend_per_day=_money(merged.get("max-spend-per-day")),
        notify=NotifySettings(url=merged.get("notify"), command=merged.get("notify-command")),
        state_dir=state_dir)


def controller_command(
    repo: Annotated[str | None, typer.Option(
        "--repo", help="the spec repository: a local path or a URL git can fetch")] = None,
    branch: Annotated[str | None, typer.Option(
        "--branch", help="the branch to reconcile [default: main]")] = None,
    path: Annotated[str | None, typer.Option(
        "--path", help="the specs' folder (or file) in the repository [default: specs/]")] = None,
    interval: Annotated[str | None, typer.Option(
        "--interval", help="how often to poll the repository and the lineages "
        "[default: 60s]")] = None,
    executor: Annotated[str | None, typer.Option(
        "--executor", help="local (this host) or slurm (a job per lineage; docs/slurm.md) "
        "[default: local]")] = None,
    parallel: Annotated[int | None, typer.Option(
        "--parallel", min=1, help="lineages at once (default: what cores and quotas allow)")
    ] = None,
    max_spend_per_day: Annotated[str | None, typer.Option(
        "--max-spend-per-day", help="start no generation that could take the day's (UTC) "
        "recorded spend above this (USD)")] = None,
    notify: Annotated[str | None, typer.Option(
        "--notify", help="a webhook to POST each transition to (JSON with a `text` field); "
        "$VARIABLES in it are taken from the environment")] = None,
    notify_command: Annotated[str | None, typer.Option(
        "--notify-command", help="a command run with each transition's JSON on its stdin")
    ] = None,
    settings_file: Annotated[Path | None, typer.Option(
        "--settings", help="a YAML file of these options, re-read on SIGHUP")] = None,
    state_dir: StateDir = None,
    max_set_members: MaxSetMembers = None,
) -> None:
    """Reconcile a spec repository's branch continuously: apply each new good commit, keep
    lineages growing, report conditions and notify transitions (docs/controller.md)."""
    from reconciler.engine.controller.loop import Controller
    from reconciler.report.progress import CONTROLLER_STATUS, PlainReporter

    _ = ExecutorOption  # the same choices as apply's --executor
    given = {"repo": repo, "branch": branch, "path": path, "interval": interval,
             "executor": executor, "parallel": parallel,
             "max-spend-per-day": max_spend_per_day, "notify": notify,
             "notify-command": notify_command}
    settings = _settings(given, settings_file, state_dir)

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def reload() -> ControllerSettings:
        try:
            return _settings(given, settings_file, state_dir)
        except typer.BadParameter as error:
            raise OuroError(f"ouro controller: --settings {settings_file}: {error}") from error

    controller = Controller(settings, PlainReporter(sys.stderr, told=CONTROLLER_STATUS), say,
                            reload)
    raise SystemExit(controller.run())


def register(app: typer.Typer) -> None:
    app.command("controller", short_help="Reconcile a spec repository continuously "
                "(GitOps).")(controller_command)
