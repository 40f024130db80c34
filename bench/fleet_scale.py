#!/usr/bin/env python3
"""Benchmark: a fleet of hundreds on one machine (issue 21): N lineages x G generations,
a loopback model that answers each call after D seconds, ``ouro apply --parallel N``.

The baseline, measured first in the same run: one lineage x G generations through the
same server. The organism is the seed; the server answers with the seed itself, so
every generation asks the model once and ends no-change (the fake organism the issue
allows: 256 Emacs lives at once are the host's cost, not ouro's). While the fleet runs,
ouro's own processes (the apply process and its Python children: every generation's
broker, any pinned kernel; never the sandboxed bwrap/Emacs) are sampled from /proc:
their summed PSS and RSS, the apply process's threads and file descriptors, how many
processes, and the sockets open to the model server. ouro's CPU is exact: apply runs in
a cgroup-v1 ``cpuacct`` group of its own (its children inherit it; every life leaves it
for its own scope before it runs), read at the end.

Targets (printed with their ratios; exit 1 if one is missed): wall <= 1.5x one
lineage's; ouro's memory (PSS, peak) <= 40 MB per running lineage; ouro's CPU per
generation < 0.25 s (printed: on 2 cores the fleet needs it well under); no file
descriptor, thread, pid or port exhaustion (apply's open descriptors stay under its
RLIMIT_NOFILE, every generation ran, no error). ``--interrupt-after S`` sends SIGINT to
apply S seconds in and checks that every generation that had started finished
(published its observation) and none started after.

    python3 bench/fleet_scale.py [--lineages 256] [--generations 3] [--delay 20]
                                 [--interval 1] [--interrupt-after S]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.provider_server import (  # noqa: E402
    FakeProvider,
    Reply,
    Seen,
    chat_ok,
    openai_models,
)

SEED = (ROOT / "reconciler" / "kernel" / "transaction" / "organism.el").read_text()
MAIN = "import sys; from reconciler.cli import console_main; sys.argv[0] = 'ouro'; console_main()"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
WALL_RATIO, MB_PER_LINEAGE, CPU_PER_GENERATION = 1.5, 40.0, 0.25


def write_specs(folder: Path, count: int, generations: int, url: str) -> None:
    folder.mkdir(parents=True)
    for index in range(count):
        (folder / f"l{index}.yaml").write_text(
            "apiVersion: ouro/v1\nkind: Lineage\n"
            f"metadata: {{name: fleet-{index}}}\n"
            f"spec:\n  generations: {generations}\n"
            "  model:\n    provider: openai-compatible\n    name: bench-model\n"
            f"    base_url: {url}\n    api_key_env: null\n    budget_usd: \"0.10\"\n"
            "    price: {input_usd_per_mtok: \"0.01\", output_usd_per_mtok: \"0.01\"}\n"
            "  ceilings: {wall: 300s, cpu: 30s, memory: 512MiB}\n"
        )


@dataclasses.dataclass
class Peak:
    """The largest values seen while apply ran (and at which sample)."""

    pss_mb: float = 0.0
    rss_mb: float = 0.0
    brokers_at_pss: int = 0
    threads: int = 0
    fds: int = 0
    processes: int = 0
    python_processes: int = 0
    sockets: int = 0
    samples: int = 0
    cpu_by_pid: dict[int, tuple[str, float]] = dataclasses.field(default_factory=dict)

    def cpu_by_kind(self) -> dict[str, float]:
        """Each child kind's CPU as last sampled (a lower bound: a child's last second
        before it exits is not seen)."""
        kinds: dict[str, float] = {}
        for kind, seconds in self.cpu_by_pid.values():
            kinds[kind] = kinds.get(kind, 0.0) + seconds
        return kinds


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _descendants(root: int) -> list[int]:
    tree, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _rollup(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in kB; zeros for a process that is gone."""
    pss = rss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
            elif line.startswith("Rss:"):
                rss = int(line.split()[1])
    except OSError:
        pass
    return pss, rss


def _count(path: str) -> int:
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def _kind(pid: int) -> str:
    """What one of apply's Python children is: a broker, an audit, or other."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "other"
    if b"audit_child" in command:
        return "audit"
    return "broker" if b"broker" in command else "other"


def _threads(pid: int) -> int:
    return _count(f"/proc/{pid}/task")


def _sockets_to(port: int) -> int:
    """TCP sockets (any state) whose remote end is the model server's port."""
    wanted = f":{port:04X}"
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        total += sum(1 for line in lines if line.split()[2].endswith(wanted))
    return total


def sample(apply_pid: int, port: int, peak: Peak) -> None:
    pids = _descendants(apply_pid)
    ours = [pid for pid in pids if _comm(pid).startswith("python")]
    pss = rss = 0
    for pid in ours:
        one = _rollup(pid)
        pss, rss = pss + one[0], rss + one[1]
        if pid != apply_pid:
            with contextlib.suppress(OSError, IndexError):
                peak.cpu_by_pid[pid] = (_kind(pid), _cpu_of(pid))
    peak.samples += 1
    if pss / 1024 > peak.pss_mb:
        brokers = sum(1 for pid in ours if pid != apply_pid and _kind(pid) == "broker")
        peak.pss_mb, peak.brokers_at_pss = pss / 1024, brokers
    peak.rss_mb = max(peak.rss_mb, rss / 1024)
    peak.threads = max(peak.threads, _threads(apply_pid))
    peak.fds = max(peak.fds, _count(f"/proc/{apply_pid}/fd"))
    peak.processes = max(peak.processes, len(pids))
    peak.python_processes = max(peak.python_processes, len(ours))
    peak.sockets = max(peak.sockets, _sockets_to(port))


@dataclasses.dataclass
class Run:
    wall: float
    cpu: float | None  # seconds of ouro's own CPU (apply and its Python children)
    apply_cpu: float  # of it, the apply process's own
    lives_cpu: float  # the lives' scopes (bwrap, runner, Emacs), from the observations
    peak: Peak
    report: dict[str, Any]
    returncode: int
    stderr: str
    interrupted_at: float | None = None


def _cpu_group() -> Path | None:
    """A cpuacct group of this benchmark's own, or None where cgroup v1 is not writable."""
    group = CPUACCT / f"ouro-bench-{os.getpid()}-{time.monotonic_ns()}"
    try:
        group.mkdir()
    except OSError:
        return None
    return group


def apply(specs: Path, state: Path, parallel: int, port: int, interval: float,
          interrupt_after: float | None = None) -> Run:
    env = dict(os.environ, OURO_STATE_DIR=str(state),
               OURO_INSTRUMENT_COMMIT=os.environ.get("OURO_INSTRUMENT_COMMIT", "b" * 40))
    group = _cpu_group()
    argv = [sys.executable, "-c", MAIN, "apply", "--yes", "--json", "--parallel",
            str(parallel), str(specs)]
    if group is not None:  # join the group before anything runs; exec keeps the pid
        argv = ["/bin/sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *argv]
    peak = Peak()
    started = time.monotonic()
    process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    out: dict[str, str] = {}
    readers = [threading.Thread(target=lambda k=k, s=s: out.__setitem__(k, s.read()))
               for k, s in (("out", process.stdout), ("err", process.stderr))]
    for reader in readers:
        reader.start()
    interrupted_at = None
    while not _exited(process.pid):
        sample(process.pid, port, peak)
        if interrupt_after is not None and interrupted_at is None \
                and time.monotonic() - started >= interrupt_after:
            process.send_signal(signal.SIGINT)
            interrupted_at = time.monotonic() - started
        time.sleep(interval)
    wall = time.monotonic() - started
    own = _cpu_of(process.pid)  # exited, not yet reaped: its own CPU, all threads
    process.wait()
    for reader in readers:
        reader.join()
    cpu = None
    if group is not None:
        cpu = int((group / "cpuacct.usage").read_text()) / 1e9
        group.rmdir()
    try:
        report = json.loads(out.get("out", ""))
    except ValueError:
        report = {}
    return Run(wall, cpu, own, lives_cpu(state), peak, report, process.returncode,
               out.get("err", ""), interrupted_at)


def lives_cpu(state: Path) -> float:
    """The lives' CPU (each generation's scope, as its observation records it), seconds."""
    total = 0
    for record in state.glob("*.observations/generations/*.json"):
        with contextlib.suppress(OSError, ValueError):
            total += json.loads(record.read_text()).get("cpu_usage_nsec") or 0
    return total / 1e9


def _exited(pid: int) -> bool:
    """Has ``pid`` exited? Leaves it unreaped (its /proc entry keeps its CPU times)."""
    found = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return found is not None and found.si_pid == pid


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of one process (all its threads; not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def generations_run(run: Run) -> int:
    return sum(item.get("generations_run", 0) for item in run.report.get("lineages", []))


def errors_of(run: Run) -> list[str]:
    return [e for item in run.report.get("lineages", []) for e in item.get("errors", [])]


def started_and_finished(state: Path) -> tuple[int, int]:
    """From the event log: generations that started, and that finished (published)."""
    started = finished = 0
    for line in (state / "events.jsonl").read_text().splitlines():
        kind = json.loads(line).get("event")
        started += kind == "generation-started"
        finished += kind == "generation"
    return started, finished


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lineages", type=int, default=256)
    parser.add_argument("--generations", type=int, default=3)
    parser.add_argument("--delay", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--interrupt-after", type=float, default=None)
    args = parser.parse_args()
    raise_fd_limit()  # the model server holds one connection per running generation
    load = os.getloadavg()
    chat = dataclasses.replace(chat_ok(SEED), delay=args.delay)

    def answer(seen: Seen, number: int) -> Reply:
        del number  # the probe's model list comes at once; every generation's call waits
        return openai_models() if seen.method == "GET" else chat

    with FakeProvider(answer, backlog=4096) as fake, \
            tempfile.TemporaryDirectory(prefix="ouro-fleet-") as folder:
        base = Path(folder)
        port = int(fake.url.rsplit(":", 1)[1])
        write_specs(base / "one", 1, args.generations, fake.url)
        write_specs(base / "fleet", args.lineages, args.generations, fake.url)
        one = apply(base / "one", base / "state-one", 1, port, args.interval)
        fleet = apply(base / "fleet", base / "state-fleet", args.lineages, port, args.interval,
                      args.interrupt_after)
        counts = started_and_finished(base / "state-fleet")
        code = report(args, load, one, fleet, counts)
        sys.stdout.flush()
        shutil.rmtree(base, ignore_errors=True)  # (slow on a disk that discards)
    return code


def report(args: argparse.Namespace, load: tuple[float, float, float], one: Run, fleet: Run,
           counts: tuple[int, int]) -> int:
    n, g = args.lineages, args.generations
    ran = generations_run(fleet)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    peak = fleet.peak
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on "
          f"{os.cpu_count()} CPUs; after: {os.getloadavg()[0]:.2f}")
    print(f"model: loopback, {args.delay:g} s per call; the seed organism (no-change)")
    print(f"one lineage x {g} generations:        {one.wall:8.2f} s  "
          f"(ouro CPU {_fmt(one.cpu)} s, {generations_run(one)} generations)")
    print(f"{n} lineages x {g}, --parallel {n}: {fleet.wall:8.2f} s  "
          f"(ouro CPU {_fmt(fleet.cpu)} s, {ran} generations, exit {fleet.returncode})")
    ok = not errors_of(fleet) and not errors_of(one)
    for error in (errors_of(one) + errors_of(fleet))[:5]:
        print(f"  error: {error}")
    if fleet.returncode not in (0, 130) or not fleet.report:
        print(f"  apply failed: {fleet.stderr[-1500:]}")
        ok = False
    per_lineage = peak.pss_mb / max(1, min(n, peak.brokers_at_pss or n))
    print(f"ouro's memory, peak: PSS {peak.pss_mb:.0f} MB with {peak.brokers_at_pss} "
          f"brokers running = {per_lineage:.1f} MB per running lineage (target <= "
          f"{MB_PER_LINEAGE:g}); RSS summed {peak.rss_mb:.0f} MB "
          f"({peak.samples} samples, every {args.interval:g} s)")
    print(f"apply process, peak: {peak.threads} threads, {peak.fds} open descriptors "
          f"(soft limit {limit}); {peak.processes} processes in its tree "
          f"({peak.python_processes} of them ouro's); {peak.sockets} sockets to the model")
    ok = ok and per_lineage <= MB_PER_LINEAGE and peak.fds < limit
    if fleet.cpu is not None and ran:
        per_gen = fleet.cpu / ran
        print(f"ouro's CPU per generation: {per_gen:.3f} s (target < {CPU_PER_GENERATION:g} "
              f"s; every cost amortized: start, plan, probe, audit): apply process "
              f"{fleet.apply_cpu / ran:.3f} s + its children "
              f"{(fleet.cpu - fleet.apply_cpu) / ran:.3f}"
              f" s; one lineage: {_fmt(one.cpu and one.cpu / max(1, generations_run(one)))} s "
              f"(apply {one.apply_cpu / max(1, generations_run(one)):.3f} s)")
        kinds = ", ".join(f"{kind} {seconds / ran:.3f} s" for kind, seconds
                          in sorted(peak.cpu_by_kind().items()))
        print(f"  children per generation, as sampled (a lower bound): {kinds}")
        cpus, total = os.cpu_count() or 1, fleet.cpu + fleet.lives_cpu
        print(f"  the lives (their scopes: bwrap, runner, Emacs) per generation: "
              f"{fleet.lives_cpu / ran:.3f} s; ouro and the lives: {total:.0f} s of CPU over "
              f"{fleet.wall:.0f} s of wall on {cpus} CPUs (at best {total / cpus:.0f} s on an "
              "idle host)")
        ok = ok and per_gen < CPU_PER_GENERATION
    if fleet.interrupted_at is not None:
        started, finished = counts
        print(f"SIGINT after {fleet.interrupted_at:.1f} s: {started} generations had started, "
              f"{finished} finished (must be equal), exit {fleet.returncode} (must be 130)")
        return 0 if ok and started == finished and fleet.returncode == 130 else 1
    ratio = fleet.wall / one.wall
    print(f"fleet / one lineage = {ratio:.2f}x (target <= {WALL_RATIO:.2f}x)")
    ok = ok and ran == n * g and ratio <= WALL_RATIO
    return 0 if ok else 1


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
