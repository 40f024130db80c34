"""CLI: `ouro doctor [PATH...]`: can this host run generations, and how."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from reconciler.cli.options import one_of
from reconciler.errors import OuroError


class DoctorUsage(OuroError):
    """doctor's options must name something it can do."""


def doctor_command(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="spec files or folders: also check their providers' API keys (a free "
        "authenticated request to each)")] = None,
    executor: Annotated[str, typer.Option(
        "--executor", callback=one_of(("local", "slurm")),
        help="local: this host; slurm: run the checks in a job on a node "
        "(with the first spec's spec.executor.slurm settings)")] = "local",
) -> None:
    """Check bubblewrap, Emacs and curl in the sandbox, the ceiling backends, API keys."""
    from reconciler.engine.doctor import ready, run_checks
    from reconciler.report.escape import terminal

    variables: list[tuple[str, str]] = []
    specs = []
    if paths:
        from reconciler.spec.load import load_specs

        specs = load_specs(paths)
        for spec in specs:
            variable = spec.model().api_key_env
            if variable:
                variables.append((spec.name, variable))
    models = [(spec.name, spec.model()) for spec in specs]
    if executor == "slurm":
        checks = _on_a_node(specs) + run_checks_keys(variables, models)
    elif executor == "local":
        checks = run_checks(variables, models=models)
    else:
        raise DoctorUsage(f"ouro doctor: --executor {executor!r}: use local or slurm")
    for check in checks:
        mark = "ok " if check.ok else ("-- " if not check.required else "NO ")
        print(terminal(f"{mark} {check.name}: {check.detail}"))
        if not check.ok and check.remedy:
            print(terminal(f"    remedy: {check.remedy}"))
    verdict = ready(checks)
    where = "the cluster's node" if executor == "slurm" else "this host"
    print(f"ready: {where} can run generations" if verdict
          else "not ready: fix the lines marked NO", file=sys.stderr)
    raise SystemExit(0 if verdict else 1)


def run_checks_keys(variables: list[tuple[str, str]], models: list[Any]) -> list[Any]:
    """The key checks and the provider probes, made here (the key lives on this host)."""
    from reconciler.engine.doctor import check_keys, check_providers

    return [*check_keys(variables), *check_providers(models)]


def _on_a_node(specs: list[Any]) -> list[Any]:
    from reconciler.engine.executors.slurm import doctor_in_job
    from reconciler.spec.models import SlurmSpec
    from reconciler.statedir import state_dir

    settings = specs[0].spec.spec.executor.slurm if specs else SlurmSpec()
    print("submitting a probe job (one real life on a node) ...", file=sys.stderr)
    job, node, checks = doctor_in_job(state_dir(), settings)
    print(f"Slurm job {job} on node {node}:")
    return list(checks)


def register(app: typer.Typer) -> None:
    app.command("doctor", short_help='Check that this host can run generations.')(doctor_command)
