"""What a life gets beyond bubblewrap's defaults (physics release 2). Trusted harness.

Rule: a life can exhaust only what is its own. Three things close what bwrap
leaves open, besides the seccomp filter (``seccomp_filter``):

- **A fresh, empty session keyring.** The kernel's keyrings are not namespaced:
  without this, a life shares the session keyring of whoever ran ouro (in any
  PAM ``pam_keyinit`` session: the operator's secrets), and one life could leave
  a key for a later life or another lineage. The sandbox is started from a
  short-lived thread that first joins a new anonymous session keyring
  (``keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)``; module ``keyring``). The
  filter also refuses ``keyctl``/``add_key``/``request_key``, so both layers hold.
- **Per-life bounds on host-wide counters.** bwrap's user namespace is created
  inside one more user namespace of the life's own (``unshare --user
  --map-root-user --mount``, the same single uid 0 mapping bwrap makes), where a
  short shell prelude, still holding that namespace's capabilities, sets the
  per-user-namespace counts (``/proc/sys/user/max_*``: the kernel charges every
  namespace up to the host's, so a life's use is bounded by what is set here),
  mounts a devpts instance of the life's own with ``max=`` (bound over bwrap's
  /dev/pts; /dev/ptmx points into it) before bwrap runs. bwrap then drops every
  capability as before. The resource limits counted per host user (``RLIMITS``:
  open files, message-queue bytes, pending signals) are set on the life's first
  process with ``prlimit`` before it runs (``Scope.popen``'s ``prepare``).
- What cannot be bounded per life on a shared kernel is said in ``UNBOUNDED``.

Everything here is disclosed in ``constraints.sandbox`` (``disclosure``) and is
physics: a change is a new physics version. This module is values only (pure: the
planner shows the manifest too); ``keyring`` and ``seccomp_bpf`` act on them.
"""

from __future__ import annotations

from typing import Any

from . import seccomp_filter

__all__ = ["LIMITS", "PRELUDE", "RLIMITS", "UNBOUNDED", "disclosure", "prelude_argv"]

# The counts a life may hold. Each is far above what Emacs, its call-process children
# and the seed organism use (none of them opens a pty, an inotify instance or 100 files)
# and far below the host's (inotify: 128 instances per user by default).
OPEN_FILES = 1024  # RLIMIT_NOFILE, soft and hard, of every process of the life
PTYS = 64  # the life's own devpts instance: max=
MESSAGE_QUEUE_BYTES = 0  # RLIMIT_MSGQUEUE
PENDING_SIGNALS = 1024  # RLIMIT_SIGPENDING
# Resource limits (soft and hard) of the life's first process, so of every process of
# it, set with prlimit before it runs. RLIMIT_MSGQUEUE and RLIMIT_SIGPENDING are counted
# per user namespace *and up to the host's* (the kernel's rlimit ucounts): a life left
# at the host's values could use up what the host's processes of the same uid have.
# POSIX message queues are no organism's business (0 bytes); 1024 queued signals are
# far more than Emacs and its children queue.
RLIMITS: tuple[tuple[str, int], ...] = (
    ("RLIMIT_NOFILE", OPEN_FILES),
    ("RLIMIT_MSGQUEUE", MESSAGE_QUEUE_BYTES),
    ("RLIMIT_SIGPENDING", PENDING_SIGNALS),
)
# /proc/sys/user/<name> in the life's own user namespace. The namespace counts leave
# bwrap the ones it makes itself (a user namespace twice with --disable-userns; one
# each of mount, pid, ipc, uts, net, cgroup); the filter refuses the organism any.
USER_NAMESPACE_COUNTS: tuple[tuple[str, int], ...] = (
    ("max_inotify_instances", 16),
    ("max_inotify_watches", 8192),
    ("max_fanotify_groups", 0),
    ("max_fanotify_marks", 0),
    ("max_user_namespaces", 4),
    ("max_mnt_namespaces", 4),
    ("max_pid_namespaces", 4),
    ("max_ipc_namespaces", 4),
    ("max_uts_namespaces", 4),
    ("max_net_namespaces", 4),
    ("max_cgroup_namespaces", 4),
    ("max_time_namespaces", 0),
)
LIMITS: dict[str, int] = {"open_files": OPEN_FILES, "message_queue_bytes": MESSAGE_QUEUE_BYTES,
                          "pending_signals": PENDING_SIGNALS, "ptys": PTYS,
                          **{name[len("max_"):]: value for name, value in USER_NAMESPACE_COUNTS}}
# Counters a life still shares with the host, and why (docs/contract.md says the same).
UNBOUNDED = (
    "epoll watches (fs.epoll.max_user_watches) and pipe buffers (fs.pipe-user-pages-*) "
    "are counted per host user, not per user namespace: the life's memory ceiling "
    "bounds them (each is charged to its cgroup), no per-life count can",
)

UNSHARE = "/usr/bin/unshare"
# Runs in the life's own user and mount namespace as its uid 0 (full capabilities there,
# none outside), then execs bwrap ("$@"). Any failure stops here: bwrap never runs
# without the bounds (set -e; the mount happens before the exec or not at all). A count
# the running kernel does not have (max_time_namespaces before Linux 5.6, the fanotify
# counts before 5.13) is not a per-namespace count there, and is skipped.
PRELUDE = "\n".join([
    "set -e",
    *(f"[ ! -e /proc/sys/user/{name} ] || echo {value} > /proc/sys/user/{name}"
      for name, value in USER_NAMESPACE_COUNTS),
    "mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,max="
    f"{PTYS} ouro-devpts /dev/pts",
    'exec "$@"',
])


def prelude_argv() -> list[str]:
    """The command that runs before bwrap (bwrap's own argv follows it)."""
    return [UNSHARE, "--user", "--map-root-user", "--mount", "--propagation", "private",
            "/bin/sh", "-c", PRELUDE, "ouro-life"]


def disclosure() -> dict[str, Any]:
    """``constraints.sandbox``: what the life gets beyond bwrap, as enforced."""
    return {
        "seccomp": seccomp_filter.disclosure(),
        "session_keyring": "new, empty, per life",
        "limits": dict(LIMITS),
    }
