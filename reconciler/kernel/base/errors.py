"""The kernel's errors. Trusted harness.

    KernelError                 anything the kernel refuses or fails at
    ├── PreflightError          refused before a generation starts; nothing was run
    │   ├── BirthError          a lineage cannot be created here (paths, branch, identity)
    │   ├── DriftError          the lineage was born under other physics
    │   ├── CeilingError        a ceiling cannot be put in force (no backend, read-back differs)
    │   ├── DamageError         a place of the lineage is damaged (corrupt object, replaced
    │   │                       worktree, stale lock): a refusal naming the repair
    │   └── ProviderConfigError unknown provider, missing key, no price
    ├── ConcurrentChangeError   a ref moved behind the kernel's back (compare-and-swap failed)
    ├── DecoderRejection        the result archive is not a publishable tree (a death, not an error)
    ├── TransientError          infrastructure that may work on a retry (git lock, cgroup busy)
    ├── StorageError            a write to the lineage's places failed on the host (no space)
    └── RecoveryError           leftovers that cannot be reconciled automatically

Messages start with the component ("kernel: ...") and say what a human should do.
"""

from __future__ import annotations

from .refusals import KernelRefusal


class KernelError(Exception):
    """Base of every error the kernel raises on purpose."""


class PreflightError(KernelError):
    """Refused before any generation started: nothing ran, nothing was written."""


class BirthError(PreflightError):
    """A new lineage must start in three new paths, on valid branches, from a known instrument."""


class DriftError(PreflightError):
    """A lineage is only extended by the instrument (commit, fingerprint) it was born under."""

    def __init__(self, message: str, *, reason: KernelRefusal) -> None:
        super().__init__(message)
        self.reason = reason


class CeilingError(PreflightError):
    """No ceiling may be silently dropped: every limit must read back as set."""


class DamageError(PreflightError):
    """A lineage whose places are damaged is refused, never run or written through: a
    corrupt or missing object, a worktree replaced by a symlink, a lock left behind."""

    def __init__(self, message: str, *, reason: KernelRefusal) -> None:
        super().__init__(message)
        self.reason = reason


class ProviderConfigError(PreflightError):
    """A generation needs a known provider, its key (when it has one) and a price."""


class ConcurrentChangeError(KernelError):
    """Every ref update is a compare-and-swap: a change behind our back is never overwritten."""


class DecoderRejection(KernelError):
    """Only directories, regular files and symlinks inside the tree, within ceilings, publish."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class TransientError(KernelError):
    """Infrastructure that failed but may work if tried again after a delay."""


class StorageError(KernelError):
    """A host fault (no space left on device, an I/O error) is named with its place;
    nothing of the generation was published."""


class RecoveryError(KernelError):
    """Leftovers of an interrupted generation that the kernel cannot reconcile by itself."""
