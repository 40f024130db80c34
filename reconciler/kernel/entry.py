"""The kernel's entry point: one JSON request on stdin, one JSON outcome on stdout.

Trusted harness. ``python -m <kernel package>`` (``__main__``) runs ``main``; the
package may have any name (``reconciler.kernel``, or ``ouro_kernel_<fingerprint>``
from the kernel store): nothing here names it. The wire is documented in
docs/kernel-entry.md and versioned (``ENTRY_REQUEST_SCHEMA``,
``ENTRY_OUTCOME_SCHEMA``); a request of another schema, with an unknown or
ill-typed field, is refused, never guessed at.

Actions: ``describe`` (this kernel's fingerprint and schemas), ``birth``
(``lineage.init_lineage``), ``recover`` (``recovery.recover``), ``generation``
(``generation.run_generation``). The kernel checks the request's identity
against its own fingerprint, and the generation checks it against the
lineage's root metadata, as in-process: the caller only chose which kernel to run.

Cancellation is by signal: the first SIGTERM or SIGINT sets the generation's
cancel event (the organism is stopped, nothing is published, its spend is
recorded); the outcome is then ``cancelled``. Secrets (the model key) come
only in the request on stdin and never appear in an outcome.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import fields
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import IO, Any

from .base import identity as kernel_identity
from .base.config import (
    ENTRY_OUTCOME_SCHEMA,
    ENTRY_REQUEST_SCHEMA,
    Ceilings,
    Identity,
    LineagePaths,
    ModelConfig,
    Price,
    Provenance,
)
from .base.errors import (
    BirthError,
    CeilingError,
    ConcurrentChangeError,
    DamageError,
    DriftError,
    KernelError,
    PreflightError,
    ProviderConfigError,
    RecoveryError,
    StorageError,
    TransientError,
)

__all__ = ["ACTIONS", "ERROR_KINDS", "OUTCOME_FIELDS", "RequestError", "handle", "main",
           "parse_request"]

ACTIONS = ("describe", "birth", "recover", "generation")
# Outcome error kinds, most specific first: the caller maps each back to its error type.
ERROR_KINDS: tuple[tuple[str, type[BaseException]], ...] = (
    ("drift", DriftError),
    ("damage", DamageError),
    ("birth", BirthError),
    ("ceiling", CeilingError),
    ("provider-config", ProviderConfigError),
    ("preflight", PreflightError),
    ("transient", TransientError),
    ("recovery", RecoveryError),
    ("concurrent-change", ConcurrentChangeError),
    ("storage", StorageError),
    ("kernel", KernelError),
)
_MAX_REQUEST_BYTES = 1 << 20
# A generation's result in the outcome (``GenerationOutcome``'s fields as of v1).
OUTCOME_FIELDS = ("generation", "status", "outcome", "lineage_commit", "observation_commit",
                  "accounted_usd", "duration_ms", "exit_status", "external_edit",
                  # added: readers of older kernels' outcomes take None / False
                  "provider_failure", "usage_exceeds_request")


class RequestError(Exception):
    """A request is run only as its schema says: anything else is refused, unrun."""


def _object(value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestError(f"kernel: request {where} must be an object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise RequestError(f"kernel: request {where} has unknown fields {unknown}")
    return value


def _typed(value: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in value:
        raise RequestError(f"kernel: request {where}.{key} is missing")
    item = value[key]
    if not isinstance(item, kind) or (isinstance(item, bool) and kind is not bool):
        raise RequestError(f"kernel: request {where}.{key} has the wrong type")
    return item


def _decimal(text: Any, where: str) -> Decimal:
    if not isinstance(text, str):
        raise RequestError(f"kernel: request {where} must be a decimal string")
    try:
        value = Decimal(text)
    except InvalidOperation as exc:
        raise RequestError(f"kernel: request {where} is not a decimal") from exc
    if not value.is_finite() or value < 0:
        raise RequestError(f"kernel: request {where} must be finite and not negative")
    return value


def _strings(value: Any, where: str, names: tuple[str, ...],
             optional: tuple[str, ...] = ()) -> dict[str, Any]:
    found = _object(value, where, set(names) | set(optional))
    out = {name: _typed(found, name, str, where) for name in names}
    for name in optional:
        item = found.get(name)
        if item is not None and not isinstance(item, str):
            raise RequestError(f"kernel: request {where}.{name} has the wrong type")
        out[name] = item
    return out


def _model(value: Any) -> ModelConfig:
    names = {f.name for f in fields(ModelConfig)}
    found = _object(value, "model", names)
    price = _object(found.get("price"), "model.price",
                    {"input_usd_per_mtok", "output_usd_per_mtok"})
    text = _strings({k: found.get(k) for k in ("provider", "name")}, "model",
                    ("provider", "name"))
    optional = _strings({k: found.get(k) for k in ("base_url", "api_key_env", "replay_dir")},
                        "model", (), ("base_url", "api_key_env", "replay_dir"))
    return ModelConfig(
        provider=text["provider"], name=text["name"],
        price=Price(_decimal(price.get("input_usd_per_mtok"), "model.price.input_usd_per_mtok"),
                    _decimal(price.get("output_usd_per_mtok"),
                             "model.price.output_usd_per_mtok")),
        base_url=optional["base_url"], api_key_env=optional["api_key_env"],
        replay_dir=Path(optional["replay_dir"]) if optional["replay_dir"] else None,
        max_output_tokens=_typed(found, "max_output_tokens", int, "model"),
        max_prompt_bytes=_typed(found, "max_prompt_bytes", int, "model"),
        request_timeout_seconds=_typed(found, "request_timeout_seconds", int, "model"),
        budget_usd=_decimal(found.get("budget_usd"), "model.budget_usd"),
        store=_flag(found, "store", "model"),
    )


def _flag(value: dict[str, Any], key: str, where: str) -> bool:
    """An optional boolean (absent: False)."""
    item = value.get(key, False)
    if not isinstance(item, bool):
        raise RequestError(f"kernel: request {where}.{key} has the wrong type")
    return item


def _ceilings(value: Any) -> Ceilings:
    names = [f.name for f in fields(Ceilings)]
    found = _object(value, "ceilings", set(names))
    return Ceilings(**{name: _typed(found, name, str if name == "enforcement" else int,
                                    "ceilings") for name in names})


def _paths(value: Any) -> LineagePaths:
    found = _strings(value, "paths",
                     ("worktree", "git_dir", "observations", "branch", "observation_branch"))
    return LineagePaths(Path(found["worktree"]), Path(found["git_dir"]),
                        Path(found["observations"]), found["branch"],
                        found["observation_branch"])


def parse_request(data: bytes) -> dict[str, Any]:
    """The request as kernel values; ``RequestError`` for anything not exactly the schema."""
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise RequestError(f"kernel: the request is not JSON: {exc}") from exc
    request = _object(value, "", {"schema", "action", "identity", "paths", "model",
                                  "ceilings", "api_key", "provenance", "ran_with"})
    if request.get("schema") != ENTRY_REQUEST_SCHEMA:
        raise RequestError(f"kernel: request schema {request.get('schema')!r} is not "
                           f"{ENTRY_REQUEST_SCHEMA!r}, the one this kernel speaks")
    action = request.get("action")
    if action not in ACTIONS:
        raise RequestError(f"kernel: request action {action!r} is not one of {ACTIONS}")
    parsed: dict[str, Any] = {"action": action}
    if action == "describe":
        return parsed
    parsed["paths"] = _paths(request.get("paths"))
    if action == "recover":
        return parsed
    parsed["identity"] = Identity(**_strings(request.get("identity"), "identity",
                                             ("repository", "ref", "commit", "fingerprint")))
    if action == "birth":
        return parsed
    parsed["model"] = _model(request.get("model"))
    parsed["ceilings"] = _ceilings(request.get("ceilings"))
    key = request.get("api_key")
    if key is not None and not isinstance(key, str):
        raise RequestError("kernel: request api_key must be a string or null")
    parsed["api_key"] = key
    provenance = request.get("provenance")
    parsed["provenance"] = None if provenance is None else Provenance(**_strings(
        provenance, "provenance", (), ("spec_sha256", "spec_repository_commit", "spec_path")))
    ran_with = request.get("ran_with")
    if ran_with is not None and not isinstance(ran_with, dict):
        raise RequestError("kernel: request ran_with must be an object or null")
    parsed["ran_with"] = ran_with
    return parsed


def _own_identity(claimed: Identity) -> Identity:
    """The request's identity, if this kernel is that fingerprint."""
    mine = kernel_identity.fingerprint()
    if claimed.fingerprint != mine:
        raise DriftError(
            f"kernel: the request names fingerprint {claimed.fingerprint}, this kernel is "
            f"{mine}: a kernel only runs as itself", reason="fingerprint-drift")
    return claimed


def _ran_with(parsed: dict[str, Any], me: Identity) -> dict[str, Any]:
    """The caller's record, with the kernel's part stated by the kernel."""
    record = dict(parsed.get("ran_with") or {})
    kernel = record.get("kernel")
    record["kernel"] = {**(kernel if isinstance(kernel, dict) else {}),
                        "commit": me.commit, "fingerprint": me.fingerprint,
                        "package": __package__, "entry": ENTRY_REQUEST_SCHEMA}
    return record


def handle(parsed: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
    """Run one parsed request; the outcome's ``result``. Kernel errors propagate."""
    action = parsed["action"]
    if action == "describe":
        return {"fingerprint": kernel_identity.fingerprint(), "package": __package__,
                "request_schemas": [ENTRY_REQUEST_SCHEMA]}
    if action == "recover":
        from .transaction.recovery import recover

        report = recover(parsed["paths"])
        return {"action": report.action, "generation": report.generation,
                "detail": str(report)}
    me = _own_identity(parsed["identity"])
    if action == "birth":
        from .transaction.lineage import init_lineage

        init_lineage(parsed["paths"], me)
        return {}
    from .transaction.generation import run_generation

    outcome = run_generation(
        paths=parsed["paths"], identity=me, model=parsed["model"],
        ceilings=parsed["ceilings"], api_key=parsed["api_key"],
        provenance=parsed["provenance"], cancel=cancel, ran_with=_ran_with(parsed, me),
    )
    return {name: getattr(outcome, name) for name in OUTCOME_FIELDS} | {
        "accounted_usd": str(outcome.accounted_usd)}


def _error(exc: BaseException) -> dict[str, Any]:
    from .transaction.generation import GenerationCancelled

    if isinstance(exc, GenerationCancelled):
        kind = "cancelled"
    elif isinstance(exc, RequestError):
        kind = "request"
    else:
        kind = next(name for name, cls in ERROR_KINDS if isinstance(exc, cls))
    return {"kind": kind, "reason": getattr(exc, "reason", None), "message": str(exc),
            "notes": list(getattr(exc, "__notes__", []))}


def _install_cancel(cancel: threading.Event) -> None:
    def on_signal(signum: int, frame: object) -> None:
        del signum, frame
        cancel.set()

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal)


def _warm() -> None:
    """Import everything a request may need before reading it: a caller may start the
    kernel ahead of its request (a spare), so that the imports overlap other work."""
    from .broker import door as broker
    from .sandbox import ceilings, decoder
    from .sandbox import life as sandbox
    from .transaction import generation, lineage, recovery

    del broker, ceilings, decoder, generation, lineage, recovery, sandbox


def main(stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None,
         run: Callable[[dict[str, Any], threading.Event], dict[str, Any]] = handle) -> int:
    """Read one request, write one outcome; 0 when an outcome was written. An empty
    stdin (a spare kernel that was not needed) is no request: nothing is written."""
    from .broker import forker

    forker.ENABLED = False  # one generation per process here: a broker of its own
    source = stdin or sys.stdin.buffer
    out = stdout or os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing but the outcome reaches the caller's stdout
    cancel = threading.Event()
    _install_cancel(cancel)
    outcome: dict[str, Any] = {"schema": ENTRY_OUTCOME_SCHEMA}
    try:
        _warm()
        data = source.read(_MAX_REQUEST_BYTES + 1)
        if not data:
            return 0
        if len(data) > _MAX_REQUEST_BYTES:
            raise RequestError("kernel: the request is larger than 1 MiB")
        outcome.update(ok=True, result=run(parse_request(data), cancel))
    except (KernelError, RequestError) as exc:
        outcome.update(ok=False, error=_error(exc))
    except Exception as exc:  # a bug: still an outcome, never a bare traceback
        outcome.update(ok=False, error={"kind": "internal", "reason": None,
                                        "message": f"kernel: internal error "
                                                   f"({type(exc).__name__}): {exc}",
                                        "notes": []})
    out.write((json.dumps(outcome) + "\n").encode("utf-8"))
    out.flush()
    return 0
