"""A real single-node Slurm cluster of the test suite's own, beside whatever the machine runs.

Its own ``slurm.conf`` (``SLURM_CONF``), its own ports (``SlurmctldPort`` and ``SlurmdPort``
picked free), its own state, spool and log folders under one temporary folder, and its
own ``munged`` (own key, own socket: ``AuthInfo=socket=...``): a cluster already on the
machine is neither used nor disturbed, and ours is gone when the suite ends. The one node
is called ``localhost`` (address 127.0.0.1): a node name that is this host without being
its hostname, which is what ``apply --executor slurm`` must recognise (docs/slurm.md).

Daemons run in the foreground as children of the test process (``-D``, ``-F``), so that
stopping them needs their pids only. Needs root (slurmd runs jobs as their user) and
Debian's ``slurm-wlm`` and ``munge``; :func:`unavailable` says why a cluster cannot be
brought up, in one sentence.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NODE = "localhost"
PARTITION = "ouro"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel")
READY_STATES = ("idle", "mixed", "allocated", "completing")
CRED_EXPIRE_SECONDS = 20


class ClusterError(RuntimeError):
    """The cluster could not be brought up; the message says why and what to look at."""


def unavailable() -> str | None:
    """Why this host cannot bring up a cluster of its own, or None if it can."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return (f"{', '.join(missing)} missing: apt-get install slurm-wlm munge "
                "(.ci/run's APT_PACKAGES)")
    if os.geteuid() != 0:
        return "not root: slurmd must run as root to start jobs"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _node_hardware() -> str:
    """``CPUs=... Boards=... RealMemory=...`` of this host, from ``slurmd -C``."""
    first = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30,
                           check=True).stdout.splitlines()[0]
    fields = [item for item in first.split() if not item.startswith("NodeName=")]
    # Slurm drains a node that reports less memory than configured: leave room.
    return " ".join(
        f"RealMemory={max(1, int(item.split('=')[1]) * 9 // 10)}"
        if item.startswith("RealMemory=") else item for item in fields
    )


@dataclass
class Cluster:
    """One running cluster: its folder, its ``slurm.conf`` and its daemons."""

    root: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def environ(self) -> dict[str, str]:
        """What a process needs to talk to this cluster (and no other)."""
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.environ()}, stdin=subprocess.DEVNULL)

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for log in sorted((self.root / "log").glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log}\n" + "\n".join(text))
        return "\n".join(out)

    # --- bringing it up -------------------------------------------------------------

    def _spawn(self, name: str, *argv: str) -> None:
        log = (self.root / "log" / f"{name}.out").open("wb")
        self.processes.append(subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **self.environ()}, start_new_session=True,
        ))
        log.close()

    def _start_munge(self) -> None:
        folder = self.root / "munge"
        folder.mkdir(mode=0o700)
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn("munged", "munged", "--foreground", "--force",
                    f"--socket={self.munge_socket}", f"--key-file={key}",
                    f"--pid-file={folder / 'munged.pid'}", f"--seed-file={folder / 'seed'}",
                    f"--log-file={self.root / 'log' / 'munged.log'}")
        self._wait(lambda: self.munge_socket.is_socket(), 20, "munged's socket")

    def _write_conf(self) -> None:
        root = self.root
        lines = [
            "# The test suite's own single-node cluster (tests/slurm/cluster.py).",
            f"ClusterName=ourotest{os.getpid()}",
            f"SlurmctldHost={NODE}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire is also how long a requeued job waits to start again (120 s by
            # default): the preemption test waits for one
            f"AuthInfo=socket={self.munge_socket},cred_expire={CRED_EXPIRE_SECONDS}",
            f"StateSaveLocation={root / 'ctld'}",
            f"SlurmdSpoolDir={root / 'd'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            f"PlugStackConfig={root / 'plugstack.conf'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1",
            "MpiDefault=none",
            "ReturnToService=2",
            "JobRequeue=1",
            "MinJobAge=600",
            "KillWait=10",
            "InactiveLimit=0",
            "SlurmdTimeout=60",
            "MessageTimeout=20",
            f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={NODE} {_node_hardware()} "
            "State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE:8",
        ]
        (root / "plugstack.conf").write_text("")
        self.conf.write_text("\n".join(lines) + "\n")

    def _ready(self) -> bool:
        try:
            done = self.command("sinfo", "-h", "-N", "-o", "%T")
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0 and any(
            state.startswith(READY_STATES) for state in done.stdout.split())

    def _wait(self, condition: object, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if callable(condition) and condition():
                return
            dead = [p.args[0] for p in self.processes if p.poll() is not None]
            if dead:
                raise ClusterError(f"{', '.join(dead)} exited while waiting for {what}:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.2)
        raise ClusterError(f"no {what} within {seconds:g}s:\n{self.log_tail()}")

    def start(self) -> None:
        for folder in ("ctld", "d", "log"):
            (self.root / folder).mkdir(mode=0o755)
        self._start_munge()
        self._write_conf()
        conf = str(self.conf)
        self._spawn("slurmctld", "slurmctld", "-D", "-i", "-f", conf)
        self._spawn("slurmd", "slurmd", "-D", "-f", conf, "-N", NODE)
        self._wait(self._ready, 60, f"idle node {NODE} (sinfo)")

    # --- taking it down -------------------------------------------------------------

    def stop(self) -> None:
        """Cancel every job of this cluster, then end its daemons (this cluster's only)."""
        if any(p.poll() is None for p in self.processes):
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self.command("scancel", "--full", "--partition", PARTITION)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    if not self.command("squeue", "-h", "-o", "%i").stdout.strip():
                        break
                    time.sleep(0.5)
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> Cluster:
    """Bring up a cluster of the suite's own (raises ClusterError, saying why)."""
    reason = unavailable()
    if reason is not None:
        raise ClusterError(reason)
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="ouro-slurm-")))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster
