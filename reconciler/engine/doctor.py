"""Can this host run generations, and how? Each check really tries the thing.

The decisive check runs one real life through the kernel's own sandbox and
ceilings (a tiny organism that reports Emacs's and curl's versions), so a
green doctor means a generation can run here, not merely that programs exist.
Checks never print secrets: for API keys only whether the variable is set, and
for each provider the specs use, whether it takes the key (the probe apply makes).
"""

from __future__ import annotations

import io
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pygit2

from reconciler.engine.provider_check import Prober
from reconciler.kernel.base import errors as kernel_errors
from reconciler.kernel.base.config import ENFORCEMENTS, OFFLINE_PROVIDERS, Ceilings, ModelConfig

PROBE_ORGANISM = """\
(with-temp-file "/work/probe.txt"
  (insert emacs-version "\\n")
  (insert (if (= 0 (call-process "curl" nil t nil "--version")) "" "no curl\\n")))
"""
PROBE_CEILINGS = Ceilings(wall_seconds=30, cpu_seconds=15, memory_bytes=256 << 20, tasks=32,
                          worktree_bytes=16 << 20, worktree_files=100, tmp_bytes=16 << 20,
                          run_bytes=1 << 20)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    remedy: str = ""
    required: bool = True


def _version(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (done.stdout or done.stderr).strip().splitlines()
    return " ".join(first[0].split()[:3]) if done.returncode == 0 and first else None


def check_python() -> Check:
    return Check("python", True, f"Python {platform.python_version()}, "
                 f"pygit2 {getattr(pygit2, '__version__', '?')} (libgit2 {pygit2.LIBGIT2_VERSION})")


def check_program(name: str, version_flag: str = "--version") -> Check:
    found = shutil.which(name)
    if found is None:
        return Check(name, False, "not found on PATH",
                     f"install it (Debian: apt-get install {_debian_package(name)})")
    return Check(name, True, f"{found}: {_version([found, version_flag]) or 'version unknown'}")


def _debian_package(program: str) -> str:
    return {"bwrap": "bubblewrap", "emacs": "emacs-nox"}.get(program, program)


def check_backend(backend: str) -> Check:
    from reconciler.kernel.sandbox.ceilings import open_scope

    try:
        scope = open_scope(replace(PROBE_CEILINGS, enforcement=backend),
                           f"ouro-doctor-{os.getpid()}-{backend}")
    except kernel_errors.CeilingError as error:
        reason = str(error).split("; ", 1)[-1].split(". Run where", 1)[0]
        return Check(f"ceilings: {backend}", False, reason.removeprefix(f"{backend}: "),
                     required=False)
    scope.close()
    return Check(f"ceilings: {backend}", True, "limits set and read back", required=False)


def auto_backend(backends: Sequence[Check]) -> Check:
    """The backend ``enforcement: auto`` would use here: of the backend checks, in auto's
    order (systemd, cgroup2, cgroup1), the first that put the ceilings in force."""
    order = ", ".join(check.name.removeprefix("ceilings: ") for check in backends)
    for check in backends:
        if check.ok:
            chosen = check.name.removeprefix("ceilings: ")
            return Check("ceilings by enforcement: auto", True,
                         f"{chosen} (auto tries {order}; the first that works)", required=False)
    return Check("ceilings by enforcement: auto", False, f"none of {order} works here",
                 required=False)


def check_life() -> Check:
    """One real life: bwrap, the ceilings (auto), Emacs and curl inside."""
    from reconciler.kernel.sandbox.life import run_sandbox

    with tempfile.TemporaryDirectory(prefix="ouro-doctor-") as folder:
        kernel_dir = Path(folder)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            body = PROBE_ORGANISM.encode()
            info = tarfile.TarInfo("organism.el")
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
        (kernel_dir / "input.tar").write_bytes(buffer.getvalue())
        (kernel_dir / "journal.md").write_text("")
        try:
            result = run_sandbox(kernel_dir=kernel_dir, ceilings=PROBE_CEILINGS,
                                 scope_name=f"ouro-doctor-{os.getpid()}-life")
        except kernel_errors.KernelError as error:
            return Check("a life in the sandbox", False, str(error),
                         "see the ceilings and bwrap lines above")
    if result.exit_status != 0:
        tail = result.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        return Check("a life in the sandbox", False,
                     f"the probe organism exited {result.exit_status}: {' | '.join(tail)}",
                     "check that emacs-nox and curl are installed under /usr")
    try:
        with tarfile.open(fileobj=io.BytesIO(result.archive)) as archive:
            member = archive.extractfile("./probe.txt") or archive.extractfile("probe.txt")
            report = member.read().decode() if member else ""
    except (tarfile.TarError, KeyError):
        report = ""
    lines = report.splitlines()
    if not lines:
        return Check("a life in the sandbox", False, "the probe organism left no report")
    curl = "curl missing inside" if "no curl" in report else "curl ok"
    return Check("a life in the sandbox", "no curl" not in report,
                 f"Emacs {lines[0]}, {curl}, ceilings by {result.backend}, "
                 f"{result.duration_ms} ms", "" if "no curl" not in report
                 else "install curl (apt-get install curl)")


def check_keys(variables: Sequence[tuple[str, str]]) -> list[Check]:
    """(lineage, variable) pairs: is each key variable set? Never shows a value."""
    checks = []
    for lineage, variable in variables:
        present = bool(os.environ.get(variable))
        checks.append(Check(f"key for {lineage}", present,
                            f"{variable} is {'set' if present else 'not set'}",
                            "" if present else f"export {variable}=... before ouro apply"))
    return checks


def check_providers(models: Sequence[tuple[str, ModelConfig]],
                    prober: Prober | None = None) -> list[Check]:
    """(lineage, model) pairs: the probe apply makes, once per provider configuration."""
    prober = prober or Prober()
    checks: list[Check] = []
    seen: set[tuple[object, ...]] = set()
    for lineage, model in models:
        if model.provider in OFFLINE_PROVIDERS or Prober.key(model) in seen:
            continue
        seen.add(Prober.key(model))
        variable = model.api_key_env
        key = os.environ.get(variable) if variable else None
        if variable and not key:
            continue  # check_keys says so
        found = prober.check(model, key)
        checks.append(Check(f"provider for {lineage}", found.ok, found.message, found.remedy))
    return checks


def run_checks(key_variables: Sequence[tuple[str, str]] = (),
               life: Callable[[], Check] = check_life,
               models: Sequence[tuple[str, ModelConfig]] = ()) -> list[Check]:
    bwrap = check_program("bwrap")
    checks = [check_python(), bwrap, check_program("emacs"), check_program("curl")]
    backends = [check_backend(name) for name in ENFORCEMENTS if name != "auto"]
    checks += [*backends, auto_backend(backends)]
    if not any(check.ok for check in backends):
        checks.append(Check("ceilings", False, "no backend can put the ceilings in force",
                            "run as root with writable cgroups, or under a systemd user "
                            "manager with delegated controllers"))
    if bwrap.ok and any(check.ok for check in backends):
        checks.append(life())
    checks += check_keys(key_variables)
    checks += check_providers(models)
    return checks


def ready(checks: Sequence[Check]) -> bool:
    return all(check.ok for check in checks if check.required)
