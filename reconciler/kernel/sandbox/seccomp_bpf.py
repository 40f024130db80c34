"""The seccomp filter of ``seccomp_filter.RULES`` as BPF, built by libseccomp. Trusted harness.

Rule: only this module imports ``pyseccomp`` (physics release 2: kernels before it
never do). The BPF is built once per process, for the machine's native ABI (x86-64 or
aarch64), default ENOSYS (release 5: an allow list), with libseccomp's bad-architecture
action set to ENOSYS (i386 and x32, arm32 calls are refused whole), and handed to bwrap
through a memfd (``--seccomp FD``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import platform
import threading

from ..base import seccomp_filter

__all__ = ["bpf", "bpf_sha256", "filter_fd", "warm"]

_LOCK = threading.Lock()
# The machines the table is written for (physics release 5): the same names, resolved
# by libseccomp for the machine's own ABI.
_ARCHITECTURES = ("x86_64", "aarch64")


def bpf() -> bytes:
    """The filter as BPF for this machine's native ABI, built once per process.

    Raises ``OSError`` or ``RuntimeError`` (libseccomp missing or refusing a rule)."""
    with _LOCK:
        return _build(seccomp_filter.RULES)


@functools.cache
def _build(rules: tuple[seccomp_filter.Rule, ...]) -> bytes:
    if platform.machine() not in _ARCHITECTURES:
        raise RuntimeError(f"the seccomp table is written for x86-64 and aarch64, not "
                           f"{platform.machine()}")
    return build_for(rules, None)


def build_for(rules: tuple[seccomp_filter.Rule, ...], machine: str | None) -> bytes:
    """The BPF of ``rules`` for ``machine`` ("x86_64" or "aarch64"; None: this machine's
    own ABI, as every life gets). A name the architecture does not have (``open`` and
    ``fork`` on aarch64) is skipped."""
    import pyseccomp  # physics release 2 only: older kernels never import it

    refuse = {"EPERM": pyseccomp.ERRNO(errno.EPERM), "ENOSYS": pyseccomp.ERRNO(errno.ENOSYS)}
    actions = {**refuse, "ALLOW": pyseccomp.ALLOW}
    built = pyseccomp.SyscallFilter(refuse[seccomp_filter.DEFAULT_ACTION])
    built.set_attr(pyseccomp.Attr.ACT_BADARCH, refuse["ENOSYS"])
    arch = pyseccomp.Arch.NATIVE
    if machine is not None:
        arch = {"x86_64": pyseccomp.Arch.X86_64, "aarch64": pyseccomp.Arch.AARCH64}[machine]
        if not built.exist_arch(arch):  # another machine's: its ABI instead of ours
            built.add_arch(arch)
            built.remove_arch(pyseccomp.Arch.NATIVE)
    ops = {"MASKED_EQ": pyseccomp.MASKED_EQ, "NE": pyseccomp.NE, "EQ": pyseccomp.EQ}
    for rule in rules:
        if pyseccomp.resolve_syscall(arch, rule.syscall) < 0:
            continue
        args = [pyseccomp.Arg(index, ops[op], a, b) for index, op, a, b in rule.args]
        built.add_rule_exactly(actions[rule.action], rule.syscall, *args)
    fd = os.memfd_create("ouro-seccomp-export", os.MFD_CLOEXEC)
    with os.fdopen(fd, "w+b") as sink:
        built.export_bpf(sink)
        sink.seek(0)
        return sink.read()


def warm() -> None:
    """Build the BPF on a thread of its own, now: a generation's git work and broker
    start hide the import of libseccomp and the build (a pinned kernel, one process
    per generation, pays them every time). A failure is left for ``filter_fd`` to
    report, where the sandbox starts."""

    def build() -> None:
        with contextlib.suppress(Exception):
            bpf()

    threading.Thread(target=build, name="ouro-seccomp-build", daemon=True).start()


def bpf_sha256() -> str:
    return hashlib.sha256(bpf()).hexdigest()


def filter_fd() -> int:
    """A new readable descriptor holding the BPF (bwrap's ``--seccomp FD`` reads it to
    its end); the caller passes it to the child and closes it."""
    fd = os.memfd_create("ouro-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, bpf())
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
