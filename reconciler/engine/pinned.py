"""Run a pinned kernel (a store entry) as a subprocess, through its entry point.

``python -m <package>`` as ``kernel.base.launch`` runs it: isolated (``python -I``),
the package loaded from the entry by path (nothing else of the entry's folder is on
``sys.path``), in the store's folder, with this interpreter and its packages; one
JSON request on stdin, one JSON outcome on stdout (docs/kernel-entry.md). The child
gets a session of its own (a Ctrl-C at the terminal reaches only ouro) and
cancellation is forwarded as SIGTERM. Its outcome is mapped back to the running
kernel's result and error types, so that apply treats a pinned kernel exactly as
its own (a ``TransientError`` is retried, a ``DriftError`` names its reason, ...).

The entry is verified against its fingerprint right before it is started, and must
hold exactly its files (``state.kernel_store``): a file planted beside the package is
``kernel-damaged``, never imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from reconciler.errors import KernelStoreError
from reconciler.kernel.base import errors as kernel_errors
from reconciler.kernel.base.config import (
    ENTRY_OUTCOME_SCHEMA,
    ENTRY_REQUEST_SCHEMA,
    Ceilings,
    Identity,
    LineagePaths,
    ModelConfig,
    Provenance,
)
from reconciler.kernel.base.launch import module_command
from reconciler.kernel.base.refusals import KernelRefusal, as_kernel_refusal
from reconciler.state.kernel_store import KernelStore, StoredKernel

if TYPE_CHECKING:  # imported when a generation runs: planning never loads the kernel's parts
    from reconciler.kernel.transaction.generation import GenerationOutcome

__all__ = ["PinnedKernel", "request_json"]

_ERRORS: Mapping[str, type[kernel_errors.KernelError]] = {
    "birth": kernel_errors.BirthError,
    "ceiling": kernel_errors.CeilingError,
    "provider-config": kernel_errors.ProviderConfigError,
    "preflight": kernel_errors.PreflightError,
    "transient": kernel_errors.TransientError,
    "recovery": kernel_errors.RecoveryError,
    "concurrent-change": kernel_errors.ConcurrentChangeError,
    "storage": kernel_errors.StorageError,
}
_STDERR_TAIL = 4000


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal | Path):
        return str(value)
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    return value


def request_json(action: str, *, paths: LineagePaths, identity: Identity | None = None,
                 model: ModelConfig | None = None, ceilings: Ceilings | None = None,
                 api_key: str | None = None, provenance: Provenance | None = None,
                 ran_with: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A request of schema ``ENTRY_REQUEST_SCHEMA`` (docs/kernel-entry.md)."""
    request: dict[str, Any] = {
        "schema": ENTRY_REQUEST_SCHEMA, "action": action,
        "paths": {name: str(getattr(paths, name)) for name in
                  ("worktree", "git_dir", "observations", "branch", "observation_branch")},
    }
    if identity is not None:
        request["identity"] = dataclasses.asdict(identity)
    if model is not None and ceilings is not None:
        model_json = _jsonable(dataclasses.asdict(model))
        if not model.store:  # added after v1: kernels from before refuse fields they lack
            model_json.pop("store", None)
        request.update(
            model=model_json,
            ceilings=dataclasses.asdict(ceilings), api_key=api_key,
            provenance=dataclasses.asdict(provenance) if provenance is not None else None,
            ran_with=dict(ran_with) if ran_with is not None else None,
        )
    return request


def _raise(error: Any, kernel: StoredKernel) -> None:
    if not isinstance(error, dict):
        raise kernel_errors.KernelError(f"kernel {kernel.commit[:12]}…: an outcome without "
                                        "a readable error")
    message = str(error.get("message") or "kernel: failed")
    kind = error.get("kind")
    failure: kernel_errors.KernelError
    if kind in ("drift", "damage"):
        kinds = {"drift": kernel_errors.DriftError, "damage": kernel_errors.DamageError}
        default: KernelRefusal = "fingerprint-drift" if kind == "drift" else "damaged"
        failure = kinds[str(kind)](message, reason=as_kernel_refusal(error.get("reason"),
                                                                     default))
    elif kind == "cancelled":
        from reconciler.kernel.transaction.generation import GenerationCancelled

        failure = GenerationCancelled(message)
    else:
        failure = _ERRORS.get(str(kind), kernel_errors.KernelError)(message)
    for note in error.get("notes") or []:
        failure.add_note(str(note))
    raise failure


@dataclasses.dataclass
class _Child:
    process: subprocess.Popen[bytes]
    stderr: IO[bytes]


class PinnedKernel:
    """One store entry, run through its entry point.

    With ``spare``, the next request's process is started as soon as one request is
    sent: it imports the kernel while this generation runs, and waits for its request
    on stdin (an unused spare is closed: an empty stdin is no request). The entry is
    verified before every request, and a spare is only ever started right after.
    """

    def __init__(self, store: KernelStore, kernel: StoredKernel, *, spare: bool = False) -> None:
        self.store, self.kernel, self.keep_spare = store, kernel, spare
        self._spare: _Child | None = None
        self._finishing: list[_Child] = []  # gave their outcome, may still be exiting

    def _verified(self) -> StoredKernel:
        entry = self.store.get(self.kernel.fingerprint)  # KernelStoreError if damaged
        if entry is None:
            raise KernelStoreError(
                f"ouro: kernel store entry {self.kernel.path} disappeared; apply again")
        return entry

    @staticmethod
    def _spawn(entry: StoredKernel) -> _Child:
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the child)
        try:
            process = subprocess.Popen(
                # isolated (-I), the package loaded from the entry by path and nothing else of
                # it, in the store's folder (outside the entry); -B: the entry's verified byte
                # code is read, never added to
                module_command(entry.path, entry.package, no_bytecode=True),
                cwd=entry.path.parent,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                close_fds=True, start_new_session=True,
            )
        except OSError as exc:
            stderr.close()
            raise kernel_errors.TransientError(
                f"ouro: cannot start kernel {entry.commit[:12]}… from {entry.path}: "
                f"{exc}") from exc
        return _Child(process, stderr)

    def close(self) -> None:
        """End the spare, if any (it was waiting for a request that will not come), and
        wait for the children that gave their outcome to exit."""
        spare, self._spare = self._spare, None
        if spare is not None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                spare.process.communicate(b"", timeout=10)
            self._finishing.append(spare)
        for child in self._finishing:
            try:
                child.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
        self._reap()

    def call(self, request: dict[str, Any],
             cancel: threading.Event | None = None) -> dict[str, Any]:
        """Run one request; its ``result``, or the kernel's error raised as its own type."""
        entry = self._verified()
        child, self._spare = self._spare, None
        if child is None or child.process.poll() is not None:
            if child is not None:
                child.stderr.close()
            child = self._spawn(entry)
        stop = threading.Event()
        watcher = threading.Thread(target=self._forward, args=(child.process, cancel, stop),
                                   daemon=True, name="ouro-pinned-cancel")
        watcher.start()
        try:
            self._send(child.process, json.dumps(request).encode("utf-8"))
            if self.keep_spare:  # started once the request is on its way: beside the run
                self._spare = self._spawn(entry)
            line = self._receive(child.process)
        finally:
            stop.set()
            watcher.join()
        outcome = self._parse(line)
        if outcome is None:  # no outcome: wait for its end, and say how it ended
            child.process.wait()
        self._finishing.append(child)  # ends by itself: its work is done, the outcome given
        self._reap()
        if outcome is None:
            child.stderr.seek(0)
            tail = child.stderr.read()[-_STDERR_TAIL:].decode("utf-8", "replace").strip()
            self._no_outcome(child.process.returncode, tail, entry)
        return self._result(outcome, entry)

    @staticmethod
    def _send(process: subprocess.Popen[bytes], request: bytes) -> None:
        assert process.stdin is not None
        try:
            process.stdin.write(request)
            process.stdin.close()
        except BrokenPipeError:
            pass  # it ended early: its stdout (or its status) says why

    @staticmethod
    def _receive(process: subprocess.Popen[bytes]) -> bytes:
        """The outcome's line, not waiting for the process to exit: everything the kernel
        does is done before it writes the outcome."""
        assert process.stdout is not None
        line = process.stdout.readline()
        process.stdout.close()
        return line

    def _reap(self) -> None:
        """Forget the children that have exited (their stderr files closed)."""
        running = []
        for child in self._finishing:
            if child.process.poll() is None:
                running.append(child)
            else:
                child.stderr.close()
        self._finishing = running

    @staticmethod
    def _forward(child: subprocess.Popen[bytes], cancel: threading.Event | None,
                 stop: threading.Event) -> None:
        if cancel is None:
            return
        while not stop.wait(0.1):
            if cancel.is_set():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)
                return

    @staticmethod
    def _parse(line: bytes) -> dict[str, Any] | None:
        try:
            outcome = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(outcome, dict) or outcome.get("schema") != ENTRY_OUTCOME_SCHEMA:
            return None
        return outcome

    @staticmethod
    def _no_outcome(status: int, tail: str, entry: StoredKernel) -> NoReturn:
        how = f"signal {-status}" if status < 0 else f"status {status}"
        raise kernel_errors.KernelError(
            f"kernel {entry.commit[:12]}… ({entry.fingerprint[:12]}…, from the store) ended "
            f"({how}) without an outcome"
            + (f"; its stderr ends: {tail[-600:]}" if tail else "")
            + "; any leftovers of the generation are recovered by the next apply")

    @staticmethod
    def _result(outcome: dict[str, Any], entry: StoredKernel) -> dict[str, Any]:
        if not outcome.get("ok"):
            _raise(outcome.get("error"), entry)
        result = outcome.get("result")
        return result if isinstance(result, dict) else {}

    def generation(self, *, paths: LineagePaths, identity: Identity, model: ModelConfig,
                   ceilings: Ceilings, api_key: str | None, provenance: Provenance | None,
                   cancel: threading.Event | None,
                   ran_with: Mapping[str, Any] | None) -> GenerationOutcome:
        from reconciler.kernel.transaction.generation import GenerationOutcome

        result = self.call(request_json(
            "generation", paths=paths, identity=identity, model=model, ceilings=ceilings,
            api_key=api_key, provenance=provenance, ran_with=ran_with), cancel)
        failure = result.get("provider_failure")  # a kernel from before records none
        try:
            return GenerationOutcome(
                generation=int(result["generation"]), status=result["status"],
                outcome=str(result["outcome"]), lineage_commit=str(result["lineage_commit"]),
                observation_commit=str(result["observation_commit"]),
                accounted_usd=Decimal(str(result["accounted_usd"])),
                duration_ms=int(result["duration_ms"]), exit_status=int(result["exit_status"]),
                external_edit=result.get("external_edit"),
                provider_failure=failure if isinstance(failure, dict) else None,
                usage_exceeds_request=result.get("usage_exceeds_request") is True,
            )
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise kernel_errors.KernelError(
                f"kernel {self.kernel.commit[:12]}…: its generation outcome is not readable "
                f"({exc}); the generation itself is recorded in the lineage") from exc

    def birth(self, paths: LineagePaths, identity: Identity) -> None:
        self.call(request_json("birth", paths=paths, identity=identity))

    def recover(self, paths: LineagePaths) -> str:
        result = self.call(request_json("recover", paths=paths))
        return str(result.get("detail") or result.get("action") or "nothing to recover")
