"""The seccomp filter every life runs under (physics release 2). Trusted harness.

Rule: the filter is built by libseccomp (through ``pyseccomp``, a ctypes binding
over Debian's libseccomp2) from the table ``RULES`` below and exported as BPF for
bubblewrap's ``--seccomp FD``; no BPF is ever written by hand. The default is to
allow: the table names what a life is refused, each with its reason. A refused
call fails with EPERM or ENOSYS, never a kill, so the organism sees an ordinary
error. Calls of a foreign ABI (i386 ``int 0x80``, x32) fail with ENOSYS whatever
they are: the rules are written for the native x86_64 numbers only, so the
other ABIs, where a rule could be sidestepped, are closed whole (libseccomp's
bad-architecture action; Flatpak adds the other arches' rules instead, which a
life that runs no 32-bit code does not need).

The table is physics: it is disclosed in ``constraints.sandbox.seccomp`` of the
capability manifest (and so recorded with every generation), with the sha256
of its canonical JSON; changing it is a new physics version. Modelled on
Flatpak's filter (flatpak-run.c ``setup_seccomp``) and Docker's default profile
(moby profiles/seccomp/default.json): their deny lists, less what the sandbox
already makes impossible some other way, plus what this kernel's threat model
adds (the keyring, io_uring, socket families).

This module is the table alone, pure (the planner shows the manifest too);
``seccomp_bpf`` builds the filter from it with ``pyseccomp``, which only that
module imports, so reading the table needs no libseccomp.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["RULES", "SOCKET_FAMILIES_ALLOWED", "Cmp", "Rule", "disclosure", "table_sha256"]

SCHEMA = "ouro-seccomp/v1"


# One comparison of a system call argument, as libseccomp takes it: (argument index,
# operator, datum a, datum b); "MASKED_EQ" is ``arg & a == b``, "NE"/"GE" compare to a.
Cmp = tuple[int, str, int, int]


@dataclass(frozen=True)
class Rule:
    """Refuse ``syscall`` with ``errno`` for ``reason``: always, or when every comparison
    of ``args`` holds (``when`` says it in words; it is disclosed)."""

    syscall: str
    errno: str  # "EPERM" or "ENOSYS"
    reason: str
    args: tuple[Cmp, ...] = ()
    when: str = ""


def _masked(index: int, mask: int, value: int) -> Cmp:
    return (index, "MASKED_EQ", mask, value)


_CLONE_NAMESPACE_FLAGS = (
    ("CLONE_NEWNS", 0x00020000), ("CLONE_NEWCGROUP", 0x02000000),
    ("CLONE_NEWUTS", 0x04000000), ("CLONE_NEWIPC", 0x08000000),
    ("CLONE_NEWUSER", 0x10000000), ("CLONE_NEWPID", 0x20000000),
    ("CLONE_NEWNET", 0x40000000),
)
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_LOW32 = 0xFFFFFFFF
# socket(2) families a life may open: AF_UNIX (the model socket, local pipes),
# AF_INET/AF_INET6 (only a loopback exists: --unshare-net), AF_NETLINK for
# NETLINK_ROUTE alone (glibc's getifaddrs and getaddrinfo's AI_ADDRCONFIG read the
# interfaces there; Emacs's network-interface-list does). Every other family --
# AF_VSOCK (the hypervisor), AF_PACKET, AF_ALG (the kernel's crypto API), AF_KEY,
# AF_XDP, AF_BLUETOOTH, AF_CAN, ... -- is attack surface no organism needs.
SOCKET_FAMILIES_ALLOWED = (("AF_UNIX", 1), ("AF_INET", 2), ("AF_INET6", 10),
                           ("AF_NETLINK", 16))
_AF_MAX = 46  # linux/socket.h; families at or above it do not exist
_NETLINK_ROUTE = 0

_E = "EPERM"
_N = "ENOSYS"
_NUMA = "NUMA memory policy: places pages on the host's nodes; a long list of CVEs"
_NS = "a new namespace: the sandbox's namespaces are the only ones a life gets"
_MOUNT_API = ("the new mount API (ENOSYS, as for a kernel without it): a life changes "
              "no mount")
_KEYS = ("the kernel keyrings: the operator's session and user keys, and a channel "
         "between lives and lineages outside every record (keys are not namespaced)")

RULES: tuple[Rule, ...] = (
    # --- the kernel keyrings (issue 24; each life also gets a fresh empty session keyring)
    Rule("add_key", _E, _KEYS),
    Rule("keyctl", _E, _KEYS),
    Rule("request_key", _E, _KEYS),
    # --- kernel interfaces with a record of exploits, which no organism needs
    Rule("io_uring_setup", _N, "io_uring: its operations bypass this filter, and a "
         "large attack surface (ENOSYS: libraries fall back to ordinary calls)"),
    Rule("io_uring_enter", _N, "io_uring (see io_uring_setup)"),
    Rule("io_uring_register", _N, "io_uring (see io_uring_setup)"),
    Rule("userfaultfd", _E, "user page-fault handling: the classic way to win kernel races"),
    Rule("perf_event_open", _E, "performance counters: host-wide information, many CVEs"),
    Rule("bpf", _E, "eBPF programs in the kernel"),
    Rule("fanotify_init", _E, "filesystem-wide monitoring (a host-wide counter too)"),
    Rule("open_by_handle_at", _E, "opens any inode by handle, past the mount tree "
         "(the 'shocker' container escape)"),
    Rule("name_to_handle_at", _E, "file handles (see open_by_handle_at); Docker denies it"),
    Rule("kcmp", _E, "compares kernel pointers of two processes: an information leak"),
    Rule("syslog", _E, "the kernel log (dmesg): host information"),
    Rule("acct", _E, "process accounting of the host"),
    Rule("quotactl", _E, "the host's disk quotas"),
    Rule("uselib", _E, "obsolete (a.out libraries)"),
    Rule("modify_ldt", _E, "16-bit segments: unneeded, a historic source of leaks"),
    Rule("iopl", _E, "port I/O privilege"),
    Rule("ioperm", _E, "port I/O privilege"),
    Rule("lookup_dcookie", _E, "obsolete profiling interface (Docker denies it)"),
    Rule("sysfs", _E, "obsolete filesystem-type queries (Docker denies it)"),
    Rule("ustat", _E, "obsolete filesystem statistics (Docker denies it)"),
    Rule("_sysctl", _E, "obsolete sysctl interface"),
    Rule("nfsservctl", _E, "obsolete NFS server control"),
    # --- other processes' memory (every process of a life is the organism's own; still,
    #     these have bypassed seccomp and namespaces in the past)
    Rule("ptrace", _E, "tracing: rewrites another process's system calls"),
    Rule("process_vm_readv", _E, "reads another process's memory (as ptrace)"),
    Rule("process_vm_writev", _E, "writes another process's memory (as ptrace)"),
    Rule("personality", _E, "execution domains other than Linux's (e.g. READ_IMPLIES_EXEC, "
         "ADDR_NO_RANDOMIZE; Flatpak refuses them too)", ((0, "NE", 0, 0),),
         "persona != PER_LINUX (0)"),
    # --- NUMA
    Rule("mbind", _E, _NUMA),
    Rule("get_mempolicy", _E, _NUMA),
    Rule("set_mempolicy", _E, _NUMA),
    Rule("migrate_pages", _E, _NUMA),
    Rule("move_pages", _E, _NUMA),
    Rule("set_mempolicy_home_node", _E, _NUMA),
    # --- the host as a machine
    Rule("kexec_load", _E, "loads a new kernel"),
    Rule("kexec_file_load", _E, "loads a new kernel"),
    Rule("reboot", _E, "restarts the machine"),
    Rule("init_module", _E, "loads a kernel module"),
    Rule("finit_module", _E, "loads a kernel module"),
    Rule("delete_module", _E, "unloads a kernel module"),
    Rule("swapon", _E, "the host's swap"),
    Rule("swapoff", _E, "the host's swap"),
    Rule("settimeofday", _E, "the host's clock"),
    Rule("clock_settime", _E, "the host's clock"),
    Rule("clock_adjtime", _E, "the host's clock"),
    # --- namespaces and mounts: the sandbox bwrap built is the only one
    Rule("unshare", _E, _NS),
    Rule("setns", _E, "joins another namespace"),
    *(Rule("clone", _E, _NS, (_masked(0, flag, flag),), f"flags & {name}")
      for name, flag in _CLONE_NAMESPACE_FLAGS),
    Rule("clone3", _N, "its flags are in memory a filter cannot read, so clone3 is refused "
         "whole (ENOSYS: glibc falls back to clone, whose flags are checked above)"),
    Rule("mount", _E, "changes the mount tree"),
    Rule("umount2", _E, "changes the mount tree"),
    Rule("pivot_root", _E, "changes the root"),
    Rule("chroot", _E, "changes the root"),
    Rule("open_tree", _N, _MOUNT_API),
    Rule("move_mount", _N, _MOUNT_API),
    Rule("fsopen", _N, _MOUNT_API),
    Rule("fsconfig", _N, _MOUNT_API),
    Rule("fsmount", _N, _MOUNT_API),
    Rule("fspick", _N, _MOUNT_API),
    Rule("mount_setattr", _N, _MOUNT_API),
    # --- terminals (CVE-2017-5226: pushing input into a terminal outside the sandbox)
    Rule("ioctl", _E, "fakes input on a terminal", (_masked(1, _LOW32, _TIOCSTI),),
         "request == TIOCSTI"),
    Rule("ioctl", _E, "copy-and-paste on a Linux console", (_masked(1, _LOW32, _TIOCLINUX),),
         "request == TIOCLINUX"),
    # --- socket families (SOCKET_FAMILIES_ALLOWED says why these four)
    *(Rule("socket", _E, "a socket family no organism needs",
           (_masked(0, _LOW32, family),), f"family == {family}")
      for family in range(_AF_MAX)
      if family not in {number for _, number in SOCKET_FAMILIES_ALLOWED}),
    Rule("socket", _E, "netlink beyond NETLINK_ROUTE: audit, uevents, firewall, ...",
         (_masked(0, _LOW32, 16), (2, "NE", _NETLINK_ROUTE, 0)),
         "family == AF_NETLINK and protocol != NETLINK_ROUTE"),
    Rule("socket", _E, "families the kernel does not have (yet)", ((0, "GE", _AF_MAX, 0),),
         f"family >= {_AF_MAX} (AF_MAX)"),
)
_NETLINK_RULE = RULES[-2]


def disclosure() -> dict[str, Any]:
    """``constraints.sandbox.seccomp``: the table as the organism reads it."""
    denied = [{"syscall": rule.syscall, "errno": rule.errno,
               **({"when": rule.when} if rule.when else {})} for rule in _disclosed_rules()]
    return {
        "schema": SCHEMA,
        "built_with": "libseccomp",
        "default_action": "allow",
        "foreign_architectures": "ENOSYS",  # i386 (int 0x80) and x32 system calls
        "socket_families_allowed": [name for name, _ in SOCKET_FAMILIES_ALLOWED],
        "denied": denied,
        "table_sha256": table_sha256(),
    }


def _disclosed_rules() -> list[Rule]:
    """The table with the per-family socket rules folded into one line."""
    rules = [rule for rule in RULES if not rule.when.startswith("family == ")
             or rule is _NETLINK_RULE]
    names = ", ".join(name for name, _ in SOCKET_FAMILIES_ALLOWED)
    folded = Rule("socket", _E, "socket families", (), f"family not in {names}")
    at = rules.index(_NETLINK_RULE)
    return [*rules[:at], folded, *rules[at:]]


@functools.cache
def table_sha256() -> str:
    """sha256 of the canonical JSON of the full table (every rule, every argument)."""
    rows: list[list[Any]] = [[r.syscall, r.errno, [list(cmp) for cmp in r.args]]
                             for r in RULES]
    rows.append(["default", "allow", "foreign-architectures", "ENOSYS"])
    text = json.dumps(rows, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()
