"""The seccomp filter every life and every probe runs under. Trusted harness.

Rule (physics release 5): an allow list. A system call runs only when the table
``RULES`` below names it, each group with its reason; every other call -- one added
to Linux after the table was written (``open_tree_attr``), one libseccomp does not
know, a number beyond the highest -- fails with ENOSYS (so glibc falls back to an
older call, as it does for ``clone3``), never a kill. A new kernel version never
widens what a life can do. Calls narrowed by argument (``socket``, ``socketpair``,
``ioctl``, ``clone``, ``personality``, ``prctl``) are allowed only for the argument
values named; the values refused by name fail with EPERM, the rest with ENOSYS.
Calls of a foreign ABI (i386 ``int 0x80``, x32 on x86-64, arm32 on aarch64) fail
with ENOSYS whatever they are (libseccomp's bad-architecture action).

The list is what Emacs, the shell tools a life may run (sh, coreutils, tar, curl,
grep/sed/awk, git, perl, python3) and the probe runner use, traced with ``strace -f``
over real lives and probes (docs/contract.md "Physics release 5"), plus their close
relatives (the ``*at``/``*2`` forms, the other architecture's spelling), less what
the sandbox refuses on purpose (named in ``_LEFT_OUT`` below with the reason, and
refused like every unnamed call). Modelled on Docker's default profile and Flatpak's
filter, which are allow lists too. The names are written once for x86-64 and aarch64:
a name the machine's architecture does not have (``open`` on aarch64) is skipped when
the filter is built.

libseccomp builds the filter from the table and exports it as BPF for bubblewrap's
``--seccomp FD`` (``seccomp_bpf``, the only module that imports ``pyseccomp``); no
BPF is written by hand. The table is physics: disclosed in ``constraints.sandbox.
seccomp`` of the capability manifest (so recorded with every generation) with the
sha256 of its canonical JSON; changing it is a new physics version. Pure values: the
planner shows the manifest too.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["ALLOWED_GROUPS", "RULES", "SOCKET_FAMILIES_ALLOWED", "Cmp", "Rule", "allowed_names",
           "disclosure", "table_sha256"]

SCHEMA = "ouro-seccomp/v2"
DEFAULT_ACTION = "ENOSYS"

# One comparison of a system call argument, as libseccomp takes it: (argument index,
# operator, datum a, datum b); "MASKED_EQ" is ``arg & a == b``, "EQ"/"NE" compare to a.
Cmp = tuple[int, str, int, int]


@dataclass(frozen=True)
class Rule:
    """``action`` ("ALLOW", or the errno "EPERM"/"ENOSYS") for ``syscall``: always, or
    when every comparison of ``args`` holds (``when`` says it in words; disclosed)."""

    syscall: str
    action: str
    reason: str
    args: tuple[Cmp, ...] = ()
    when: str = ""


# The calls a life may make, by what they are for. Every group is used by Emacs and the
# tools above; what a tool uses from a group it shares with its relatives (a program
# built against another libc version asks for the *at or *2 form).
ALLOWED_GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("files", "open, read, write and inspect files and folders: every program", (
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
        "preadv2", "pwritev2", "open", "openat", "openat2", "creat", "close", "close_range",
        "lseek", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
        "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents",
        "getdents64", "dup", "dup2", "dup3", "fcntl", "flock", "fsync", "fdatasync",
        "sync_file_range", "truncate", "ftruncate", "fallocate", "fadvise64",
        "readahead", "sendfile", "copy_file_range", "splice", "tee")),
    ("tree", "make, rename, link and remove entries, their modes, owners, times and "
     "extended attributes (tar, cp -a, git, Emacs's save)", (
        "mkdir", "mkdirat", "rmdir", "rename", "renameat", "renameat2", "link", "linkat",
        "symlink", "symlinkat", "unlink", "unlinkat", "chmod", "fchmod", "fchmodat",
        "fchmodat2", "chown", "fchown", "fchownat", "lchown", "umask", "utime", "utimes",
        "utimensat", "futimesat", "chdir", "fchdir", "getcwd", "mknod", "mknodat",
        "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
        "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
        "fremovexattr")),
    ("memory", "the process's own memory: the loader, malloc, Emacs's GC, threads' stacks "
     "(bounded by the life's memory ceiling)", (
        "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore",
        "mlock", "mlock2", "munlock", "mlockall", "munlockall", "memfd_create",
        "membarrier", "pkey_mprotect", "pkey_alloc", "pkey_free")),
    ("processes", "start, run and wait for the life's own processes and threads (sh, "
     "call-process, make-thread; the pid namespace holds only the life's)", (
        "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
        "kill", "tkill", "tgkill", "getpid", "getppid", "gettid", "getpgid", "getpgrp",
        "setpgid", "getsid", "setsid", "set_tid_address", "set_robust_list",
        "get_robust_list", "rseq", "arch_prctl", "sched_yield", "sched_getaffinity",
        "sched_setaffinity", "sched_getparam", "sched_getscheduler",
        "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
        "sched_getattr", "getpriority", "setpriority", "prlimit64", "getrlimit",
        "setrlimit", "getrusage", "times", "pidfd_open", "pidfd_send_signal",
        "restart_syscall", "ioprio_get", "ioprio_set")),
    ("credentials", "read the ids; set them only within the single-id mapping, and "
     "capabilities only downwards (every one is dropped)", (
        "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
        "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
        "setfsuid", "setfsgid", "capget", "capset")),
    ("signals", "signal handling: sh's traps, Emacs's SIGCHLD and timers", (
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend", "rt_sigpending",
        "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "pause",
        "alarm", "signalfd", "signalfd4")),
    ("time", "read the clocks, sleep, timers (Emacs's timerfd, sleep(1), timeout(1))", (
        "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday",
        "time", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
        "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
        "getitimer", "setitimer")),
    ("waiting", "wait on descriptors, pipes, futexes and file events (Emacs's event loop, "
     "curl, Python; inotify bounded per life)", (
        "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
        "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "inotify_init",
        "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "futex", "futex_waitv",
        "pipe", "pipe2")),
    ("sockets", "use the sockets socket(2)/socketpair(2) may open (the model's socket "
     "through curl; no network exists)", (
        "connect", "bind", "listen", "accept", "accept4", "getsockname", "getpeername",
        "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "setsockopt",
        "getsockopt", "shutdown")),
    ("system", "what the machine is, as the life's namespaces show it, and randomness", (
        "uname", "sysinfo", "getrandom", "getcpu")),
    ("ipc", "System V IPC in the life's own IPC namespace (POSIX message queues get "
     "RLIMIT_MSGQUEUE 0 and are not on the list)", (
        "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
        "msgget", "msgsnd", "msgrcv", "msgctl")),
    ("seccomp", "a program may narrow itself further (a filter can only take away)", (
        "seccomp",)),
)

# Not on the list, on purpose (refused like every unnamed call, with ENOSYS): clone3
# (its flags are in memory a filter cannot read; glibc falls back to clone), io_uring_*
# (its operations bypass this filter), memfd_secret, the mount calls old and new
# (mount, open_tree, open_tree_attr, move_mount, fs*, mount_setattr), unshare and setns,
# the keyrings (add_key, keyctl, request_key: not namespaced), ptrace, process_vm_*,
# kcmp and pidfd_getfd (other processes' memory and descriptors), bpf, perf_event_open,
# userfaultfd, fanotify_init, open_by_handle_at and name_to_handle_at (kernel
# interfaces with a record of exploits), the NUMA calls, the host as a machine (reboot,
# kexec, modules, swap, clock setters, syslog, acct, quotactl), sync and syncfs (a
# flush of a host filesystem: /usr is one), vmsplice (pages of user memory spliced into
# pipes: a historic exploit path, used by none of the tools) and the POSIX message
# queues (RLIMIT_MSGQUEUE is 0).


def _masked(index: int, mask: int, value: int) -> Cmp:
    return (index, "MASKED_EQ", mask, value)


def _low32_except(index: int, refused: frozenset[int]) -> list[Cmp]:
    """Comparisons, one per rule, that together match every 32-bit value of argument
    ``index`` but the ``refused`` ones (the argument is an int: the kernel reads its low
    32 bits, so a filter comparing all 64 could be passed with a high bit set). Each is
    a prefix: the top bits equal a value's, the next bit differs."""
    found: list[Cmp] = []

    def cover(prefix: int, depth: int) -> None:
        below = [v for v in refused if depth == 0 or v >> (32 - depth) == prefix]
        if not below:
            mask = (0xFFFFFFFF << (32 - depth)) & 0xFFFFFFFF
            found.append(_masked(index, mask, prefix << (32 - depth)))
        elif depth < 32:
            cover(prefix << 1, depth + 1)
            cover(prefix << 1 | 1, depth + 1)

    cover(0, 0)
    return found


_CLONE_NAMESPACE_FLAGS = (
    ("CLONE_NEWNS", 0x00020000), ("CLONE_NEWCGROUP", 0x02000000),
    ("CLONE_NEWUTS", 0x04000000), ("CLONE_NEWIPC", 0x08000000),
    ("CLONE_NEWUSER", 0x10000000), ("CLONE_NEWPID", 0x20000000),
    ("CLONE_NEWNET", 0x40000000),
)
_CLONE_NAMESPACES = sum(flag for _, flag in _CLONE_NAMESPACE_FLAGS)
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_LOW32 = 0xFFFFFFFF
# socket(2) families a life may open: AF_UNIX (the model socket, local pipes),
# AF_INET/AF_INET6 (only a loopback exists: --unshare-net), AF_NETLINK for
# NETLINK_ROUTE alone (glibc's getifaddrs and getaddrinfo's AI_ADDRCONFIG read the
# interfaces there; Emacs's network-interface-list does). Every other family --
# AF_VSOCK (the hypervisor), AF_PACKET, AF_ALG (the kernel's crypto API), AF_KEY,
# AF_XDP, AF_BLUETOOTH, ... -- is attack surface no organism needs. socketpair(2)
# makes AF_UNIX pairs only.
SOCKET_FAMILIES_ALLOWED = (("AF_UNIX", 1), ("AF_INET", 2), ("AF_INET6", 10),
                           ("AF_NETLINK", 16))
_AF_NETLINK, _NETLINK_ROUTE = 16, 0
# prctl(2) options a life may use: names and parent-death signals (sh, Emacs, Python
# threads), dumpability and capability reads, no-new-privs and seccomp (only narrow),
# subreapers, THP and speculation controls of its own, glibc's naming of anonymous maps
# (PR_SET_VMA) and aarch64's vector-length, pointer-authentication and tagged-address
# controls. Not: PR_SET_MM, PR_SET_SECUREBITS, PR_SET_PTRACER, PR_SET_IO_FLUSHER,
# PR_SCHED_CORE, PR_SET_SYSCALL_USER_DISPATCH, PR_SET_MEMORY_MERGE, perf controls.
PRCTL_OPTIONS = (
    ("PR_SET_PDEATHSIG", 1), ("PR_GET_PDEATHSIG", 2), ("PR_GET_DUMPABLE", 3),
    ("PR_SET_DUMPABLE", 4), ("PR_GET_KEEPCAPS", 7), ("PR_SET_KEEPCAPS", 8),
    ("PR_SET_NAME", 15), ("PR_GET_NAME", 16), ("PR_GET_SECCOMP", 21),
    ("PR_SET_SECCOMP", 22), ("PR_CAPBSET_READ", 23), ("PR_CAPBSET_DROP", 24),
    ("PR_GET_SECUREBITS", 27), ("PR_SET_TIMERSLACK", 29), ("PR_GET_TIMERSLACK", 30),
    ("PR_SET_CHILD_SUBREAPER", 36), ("PR_GET_CHILD_SUBREAPER", 37),
    ("PR_SET_NO_NEW_PRIVS", 38), ("PR_GET_NO_NEW_PRIVS", 39), ("PR_GET_TID_ADDRESS", 40),
    ("PR_SET_THP_DISABLE", 41), ("PR_GET_THP_DISABLE", 42), ("PR_CAP_AMBIENT", 47),
    ("PR_SVE_SET_VL", 50), ("PR_SVE_GET_VL", 51), ("PR_GET_SPECULATION_CTRL", 52),
    ("PR_SET_SPECULATION_CTRL", 53), ("PR_PAC_RESET_KEYS", 54),
    ("PR_SET_TAGGED_ADDR_CTRL", 55), ("PR_GET_TAGGED_ADDR_CTRL", 56),
    ("PR_PAC_SET_ENABLED_KEYS", 60), ("PR_PAC_GET_ENABLED_KEYS", 61),
    ("PR_SME_SET_VL", 63), ("PR_SME_GET_VL", 64), ("PR_SET_MDWE", 65), ("PR_GET_MDWE", 66),
    ("PR_SET_VMA", 0x53564D41), ("PR_GET_AUXV", 0x41555856),
)

_E, _A = "EPERM", "ALLOW"
_SOCKET_WHEN = "family is AF_UNIX, AF_INET, AF_INET6, or AF_NETLINK with NETLINK_ROUTE"
_SOCKET_NOT = "any other family, or AF_NETLINK with another protocol"
_SOCKET_WHY = "sockets of the families SOCKET_FAMILIES_ALLOWED names"
_IOCTL_WHEN = "request (low 32 bits) is not TIOCSTI or TIOCLINUX"
_FAMILIES = frozenset(number for _, number in SOCKET_FAMILIES_ALLOWED)


def _narrowed() -> tuple[Rule, ...]:
    """The calls allowed for some argument values only (and EPERM for those refused by
    name; the rules for one call never overlap, as libseccomp requires)."""
    return (
        *(Rule("socket", _A, _SOCKET_WHY, (_masked(0, _LOW32, family),), _SOCKET_WHEN)
          for family in sorted(_FAMILIES - {_AF_NETLINK})),
        Rule("socket", _A, _SOCKET_WHY, (_masked(0, _LOW32, _AF_NETLINK),
                                         _masked(2, _LOW32, _NETLINK_ROUTE)), _SOCKET_WHEN),
        *(Rule("socket", _E, "a socket family no organism needs", (cmp,), _SOCKET_NOT)
          for cmp in _low32_except(0, _FAMILIES)),
        *(Rule("socket", _E, "netlink beyond NETLINK_ROUTE: audit, uevents, firewall",
               (_masked(0, _LOW32, _AF_NETLINK), cmp), _SOCKET_NOT)
          for cmp in _low32_except(2, frozenset({_NETLINK_ROUTE}))),
        Rule("socketpair", _A, "local socket pairs (curl's wake-up pair, Python)",
             (_masked(0, _LOW32, 1),), "family is AF_UNIX"),
        *(Rule("socketpair", _E, "a socket family no organism needs", (cmp,),
               "any other family") for cmp in _low32_except(0, frozenset({1}))),
        *(Rule("ioctl", _A, "terminal, file and socket requests (isatty, FIONREAD, ...)",
               (cmp,), _IOCTL_WHEN) for cmp in _low32_except(1, frozenset({_TIOCSTI,
                                                                             _TIOCLINUX}))),
        Rule("ioctl", _E, "fakes input on a terminal (CVE-2017-5226)",
             (_masked(1, _LOW32, _TIOCSTI),), "request == TIOCSTI"),
        Rule("ioctl", _E, "copy-and-paste on a Linux console", (_masked(1, _LOW32, _TIOCLINUX),),
             "request == TIOCLINUX"),
        Rule("clone", _A, "new processes and threads (glibc's fork, posix_spawn, "
             "pthread_create)", (_masked(0, _CLONE_NAMESPACES, 0),),
             "flags carry no CLONE_NEW*"),
        *(Rule("clone", _E, "a new namespace: the sandbox's are the only ones a life gets",
               (_masked(0, flag, flag),), f"flags & {name}")
          for name, flag in _CLONE_NAMESPACE_FLAGS),
        Rule("personality", _A, "the Linux execution domain (queries by setting it)",
             ((0, "EQ", 0, 0),), "persona == PER_LINUX (0)"),
        Rule("personality", _E, "execution domains other than Linux's (READ_IMPLIES_EXEC, "
             "ADDR_NO_RANDOMIZE; Flatpak refuses them too)", ((0, "NE", 0, 0),),
             "persona != PER_LINUX (0)"),
        *(Rule("prctl", _A, "process attributes of its own (PRCTL_OPTIONS)",
               (_masked(0, _LOW32, value),), "option is one of prctl_options")
          for _, value in PRCTL_OPTIONS),
    )


RULES: tuple[Rule, ...] = (
    *(Rule(name, _A, reason) for _, reason, names in ALLOWED_GROUPS for name in names),
    *_narrowed(),
)


def allowed_names() -> frozenset[str]:
    """Every call the table allows, always or for some argument values."""
    return frozenset(rule.syscall for rule in RULES if rule.action == _A)


def disclosure() -> dict[str, Any]:
    """``constraints.sandbox.seccomp``: the table as the organism reads it (the pattern
    rules that spell one condition are folded into that condition)."""
    narrowed: dict[str, list[dict[str, str]]] = {}
    for rule in RULES:
        if not rule.args:
            continue
        row = {"action": rule.action, "when": rule.when}
        if row not in narrowed.setdefault(rule.syscall, []):
            narrowed[rule.syscall].append(row)
    return {
        "schema": SCHEMA,
        "built_with": "libseccomp",
        "default_action": DEFAULT_ACTION,
        "foreign_architectures": "ENOSYS",  # i386 and x32 on x86-64, arm32 on aarch64
        "allowed": {group: list(names) for group, _, names in ALLOWED_GROUPS},
        "narrowed": narrowed,
        "socket_families_allowed": [name for name, _ in SOCKET_FAMILIES_ALLOWED],
        "prctl_options": [name for name, _ in PRCTL_OPTIONS],
        "table_sha256": table_sha256(),
    }


@functools.cache
def table_sha256() -> str:
    """sha256 of the canonical JSON of the full table (every rule, every argument)."""
    rows: list[list[Any]] = [[r.syscall, r.action, [list(cmp) for cmp in r.args]]
                             for r in RULES]
    rows.append(["default", DEFAULT_ACTION, "foreign-architectures", "ENOSYS"])
    text = json.dumps(rows, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()
