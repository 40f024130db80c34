#!/usr/bin/env python3
"""Benchmark `ouro plan` over a fleet: 100 lineages x 1,000 generations (by default).

One command: `python bench/plan_bench.py [--lineages N] [--generations G] [--rounds R]
[--layout loose|packed]`.

The fleet is synthetic but in docs/lineage-contract.md's formats (seed with metadata,
`gen N:` commits with journal entries, `external edit` commits between some
generations and at some heads, one observation per generation (with physics release 4's
running totals), clean worktrees). It is written with pygit2, so its objects are loose, as the
kernel's are (pygit2 never packs; `--layout packed` repacks it as `git gc`
would). It is built once and cached under the temp folder's ouro-bench/, keyed by the
parameters; it is born under a fixed instrument (commit and fingerprint) that
the benchmark pins.

Measured in the same run:
- baseline: each lineage checked the way the original kernel does it, with git
  subprocesses: `rev-list --count --grep`, `show` of the metadata,
  `branch --show-current`;
- in-process: load the specs, observe every lineage, plan, render JSON;
- CLI: `ouro plan SPECS --json` as a fresh process, end to end.

Prints the figures and the ratios against the baseline; exits 1 if the plan is
wrong (every lineage must be in sync at G generations) or a target is missed:
the whole in-process plan < 1 s, checking the lineages (observe + plan + JSON,
the baseline's job) >= 10x faster than the baseline, and `ouro plan --json` as a
fresh process (Python's start-up and imports included: what a user waits for)
< 1 s; with 1,000 lineages (`--lineages 1000 --shared`: one lineage built, the
others copies of it whose object files are hard links, ~2.4 GB and ~4 min) the
command line's target is issue 21's < 2 s and the in-process whole is printed only.
The ratios of the whole plan (which also parses the YAML specs, which the
baseline does not) and of the CLI are printed too.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Outside the checkout: ouro refuses lineages on the host Python's path, and a script's
# own folder (bench/) is on its path.
OUT = Path(tempfile.gettempdir()) / "ouro-bench"
# The fleet is born under a fixed instrument (commit and fingerprint), pinned for ouro
# the way OURO_INSTRUMENT_COMMIT pins the commit, so that editing the kernel does not
# force a rebuild of 100,000 generations.
BENCH_COMMIT = "b" * 40
BENCH_FINGERPRINT = "f" * 64
PIN = ("import reconciler.state.instrument as i; "
       "i._fingerprint = lambda: " + repr(BENCH_FINGERPRINT)
       + "; from reconciler.cli import console_main; console_main()")
FORMAT = 7  # bump when the fleet's layout changes
STAMP = 1_700_000_000
TARGET_SECONDS = 1.0
TARGET_RATIO = 10.0

os.environ["OURO_INSTRUMENT_COMMIT"] = BENCH_COMMIT

import pygit2  # noqa: E402

from reconciler.kernel.base import formats, totals  # noqa: E402
from reconciler.kernel.base.config import (  # noqa: E402
    GENERATION_SCHEMA,
    LINEAGE_SCHEMA,
    OBSERVATIONS_SCHEMA,
    Ceilings,
    ModelConfig,
    constraints_manifest,
)
from reconciler.kernel.transaction import publish  # noqa: E402
from reconciler.state import instrument  # noqa: E402


def _git(*args: str, cwd: Path | None = None) -> bytes:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {result.stderr.decode(errors='replace')}")
    return result.stdout


def _json(value: object) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode()


class _Writer:
    """Commits on one branch of one repository, written with pygit2 (loose objects)."""

    def __init__(self, repo: pygit2.Repository, ref: str) -> None:
        self.repo, self.ref = repo, ref
        self.parent: pygit2.Oid | None = None
        self.tree: pygit2.Tree | None = None
        self.folders: dict[str, pygit2.Tree] = {}
        self.clock = STAMP

    def commit(self, subject: str, files: dict[str, bytes]) -> pygit2.Oid:
        root = self.repo.TreeBuilder(self.tree) if self.tree else self.repo.TreeBuilder()
        nested: dict[str, dict[str, bytes]] = {}
        for path, data in files.items():
            if "/" in path:
                folder, name = path.split("/", 1)
                nested.setdefault(folder, {})[name] = data
            else:
                root.insert(path, self.repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
        for folder, content in nested.items():
            base = self.folders.get(folder)
            sub = self.repo.TreeBuilder(base) if base else self.repo.TreeBuilder()
            for name, data in content.items():
                sub.insert(name, self.repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
            written = self.repo[sub.write()]
            assert isinstance(written, pygit2.Tree)
            self.folders[folder] = written
            root.insert(folder, written.id, pygit2.GIT_FILEMODE_TREE)
        tree = self.repo[root.write()]
        assert isinstance(tree, pygit2.Tree)
        self.tree = tree
        self.clock += 1
        who = pygit2.Signature("ouroboros", "ouroboros@localhost", self.clock, 0)
        self.parent = self.repo.create_commit(None, who, who, subject + "\n", tree.id,
                                              [self.parent] if self.parent else [])
        return self.parent

    def publish(self) -> None:
        assert self.parent is not None
        self.repo.references.create(self.ref, self.parent, force=True)
        self.repo.checkout(self.ref, strategy=pygit2.GIT_CHECKOUT_FORCE)


def build_lineage(args: tuple[Path, str, int, int, str]) -> None:
    """One lineage's three places and G generations, as ouro's kernel lays them out."""
    root, name, generations, index, layout = args
    worktree, git_dir, observations = (root / name, root / f"{name}.git",
                                       root / f"{name}.observations")
    branch, obs_branch = f"lineage-{name}", f"observations/lineage-{name}"
    organism = b";;; organism.el --- bench seed\n(message \"alive\")\n"
    metadata = {"schema": LINEAGE_SCHEMA, "instrument_repository": "https://example.invalid/ouro",
                "instrument_ref": "main", "instrument_commit": BENCH_COMMIT,
                "instrument_fingerprint": BENCH_FINGERPRINT,
                "seed_sha256": hashlib.sha256(organism).hexdigest()}
    constraints = constraints_manifest(Ceilings(), ModelConfig(provider="echo", name="echo"))

    flags = pygit2.enums.RepositoryInitFlag
    repo = pygit2.init_repository(str(git_dir), bare=False, workdir_path=str(worktree),
                                  initial_head=f"refs/heads/{branch}",
                                  flags=flags.MKPATH | flags.NO_DOTGIT_DIR)
    (worktree / ".git").write_text(f"gitdir: {git_dir}\n", encoding="utf-8")
    repo.config["core.worktree"] = str(worktree)
    obs = pygit2.init_repository(str(observations), bare=False,
                                 initial_head=f"refs/heads/{obs_branch}")
    lineage = _Writer(repo, f"refs/heads/{branch}")
    observed = _Writer(obs, f"refs/heads/{obs_branch}")

    bodies = [organism]  # organism.el of every commit, root first (for the restore rule)
    journal = ""
    lineage.commit(formats.SEED_SUBJECT, {"organism.el": organism, "journal.md": b"",
                                          ".ouroboros-lineage.json": _json(metadata)})
    observed.commit(formats.observation_init_subject(branch), {"metadata.json": _json(
        {"schema": OBSERVATIONS_SCHEMA, "lineage_branch": branch,
         "observation_branch": obs_branch,
         **{k: v for k, v in metadata.items() if k != "schema"}})})
    stamp = "2026-11-29T15:46:00+00:00"
    running = totals.RunningTotals()
    for n in range(1, generations + 1):
        if n % 50 == 0:
            lineage.commit(formats.EXTERNAL_EDIT_SUBJECT, {"notes.txt": f"edit {n}\n".encode()})
            bodies.append(organism)
        files: dict[str, bytes] = {}
        if n % 13 == 0:  # a death restores the body the kernel's rule says
            source = publish.restore_source(organism, reversed(bodies[:-1]))
            if source is not None:
                organism = bodies[-2 - source]
                files["organism.el"] = organism
            subject, entry = formats.subject_died(n, 3), formats.journal_entry(
                n, "died", stamp, exit_status=3, stderr_lines=["boom"])
            outcome = "process_exit"
        elif n % 7 == 0:
            change = formats.Change(organism_changed=True, organism_added=1, paths=1)
            organism += f";; gen {n}\n".encode()
            files["organism.el"] = organism
            subject = formats.subject_changed(n, change)
            entry = formats.journal_entry(n, "changed", stamp, detail=change.detail)
            outcome = formats.outcome_text("changed", change.detail)
        else:
            subject, entry = formats.subject_no_change(n), formats.journal_entry(
                n, "no-change", stamp)
            outcome = "no-change"
        journal = formats.append_entry(journal, entry)
        files["journal.md"] = journal.encode()
        commit = lineage.commit(subject, files)
        bodies.append(organism)
        record = {"schema": GENERATION_SCHEMA, "generation": n, "started_at": stamp,
                  "duration_ms": 500, "outcome": outcome,
                  "exit_status": 3 if outcome == "process_exit" else 0,
                  "systemd_result": "success", "cpu_usage_nsec": None,
                  "memory_peak_bytes": None, "oom_kills": 0, "lineage_commit": str(commit),
                  "result_archive_bytes": 10240, "published_bytes": 100,
                  "published_files": 2, "provider": "echo", "model": "echo",
                  "constraints": constraints, "model_calls": [], "stderr_tail": []}
        running = totals.advance(running, record)  # as physics release 4's kernel records
        record[totals.TOTALS_KEY] = totals.to_json(running)
        observed.commit(formats.observation_subject(n, outcome),
                        {formats.observation_path(n): _json(record)})
    if index % 2:
        lineage.commit(formats.EXTERNAL_EDIT_SUBJECT, {"notes.txt": b"a human, at the head\n"})
    lineage.publish()
    observed.publish()
    if layout == "packed":  # as after `git gc`: one pack each, newest objects whole
        for place in (git_dir, observations / ".git"):
            _git("--git-dir", str(place), "repack", "-a", "-d", "-q")
            _git("--git-dir", str(place), "prune-packed")


def _replicate(source: Path, target: Path, linked: Callable[[Path], bool]) -> None:
    """``source``'s tree at ``target``: the files ``linked`` says (by their path inside)
    as hard links, every other one as a copy of its own (times kept)."""
    target.mkdir()
    for folder, subfolders, files in os.walk(source):
        inside = Path(folder).relative_to(source)
        for name in subfolders:
            (target / inside / name).mkdir()
        for name in files:
            if linked(inside / name):
                os.link(Path(folder) / name, target / inside / name)
            else:
                shutil.copy2(Path(folder) / name, target / inside / name)


def _copy_lineage(args: tuple[Path, str, str]) -> None:
    """Lineage ``name``: ``first``'s history at places of its own. Objects are content-
    addressed and never rewritten: they are hard links to ``first``'s (as are the
    observation worktree's files, which plan never reads); HEAD, refs, config, index,
    logs, the lineage's worktree and its .git pointer are its own files."""
    root, first, name = args
    _replicate(root / f"{first}.git", root / f"{name}.git",
               lambda inside: inside.parts[0] == "objects")
    config = root / f"{name}.git" / "config"
    config.write_text(config.read_text(encoding="utf-8").replace(
        f"= {root / first}\n", f"= {root / name}\n"), encoding="utf-8")
    _replicate(root / f"{first}.observations", root / f"{name}.observations",
               lambda inside: inside.parts[0] != ".git" or inside.parts[1:2] == ("objects",))
    _replicate(root / first, root / name, lambda inside: False)
    (root / name / ".git").write_text(f"gitdir: {root / f'{name}.git'}\n", encoding="utf-8")


def build_fleet(lineages: int, generations: int, layout: str, shared: bool = False) -> Path:
    key = f"plan-v{FORMAT}-{layout}{'-shared' if shared else ''}-L{lineages}-G{generations}"
    root = OUT / key
    if (root / ".complete").exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    (root / "lineages").mkdir(parents=True)
    (root / "specs").mkdir()
    started = time.perf_counter()
    names = [f"l{index:03d}" for index in range(lineages)]
    jobs = [(root / "lineages", name, generations, index, layout)
            for index, name in enumerate(names[:1] if shared else names)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(build_lineage, jobs))
        if shared:
            list(pool.map(_copy_lineage, [(root / "lineages", names[0], name)
                                          for name in names[1:]], chunksize=16))
    for name in names:
        place = root / "lineages" / name
        # Shared objects record the first lineage's branches: the others adopt them by
        # naming them (docs/spec.md: storage.branch adopts a lineage under another name).
        branches = (f"    branch: lineage-{names[0]}\n"
                    f"    observation_branch: observations/lineage-{names[0]}\n"
                    if shared and name != names[0] else "")
        (root / "specs" / f"{name}.yaml").write_text(
            f"apiVersion: ouro/v1\nkind: Lineage\nmetadata:\n  name: {name}\nspec:\n"
            f"  generations: {generations}\n  model:\n    provider: echo\n    name: echo\n"
            f"  storage:\n    path: {place}\n{branches}", encoding="utf-8")
    (root / ".complete").write_text(f"{time.perf_counter() - started:.1f}s\n")
    return root


# ---------------------------------------------------------------- measurements


def baseline(root: Path, names: list[str], shared: bool = False) -> float:
    """The original kernel's way: git subprocesses per lineage."""
    started = time.perf_counter()
    for name in names:
        git_dir = root / "lineages" / f"{name}.git"
        worktree = root / "lineages" / name
        branch = f"lineage-{names[0] if shared else name}"
        count = _git("--git-dir", str(git_dir), "rev-list", "--count", "--first-parent",
                     "--grep=^gen ", branch)
        json.loads(_git("--git-dir", str(git_dir), "show",
                        f"{branch}:.ouroboros-lineage.json"))
        _git("-C", str(worktree), "branch", "--show-current")
        assert int(count) > 0
    return time.perf_counter() - started


def in_process(root: Path) -> tuple[float, float, dict[str, Any]]:
    from reconciler.plan import make_plan
    from reconciler.report.render import plan_json
    from reconciler.spec.load import load_specs
    from reconciler.state.observe import observe

    started = time.perf_counter()
    specs = load_specs([root / "specs"])
    loaded = time.perf_counter()
    plan = make_plan([(spec, observe(spec.paths())) for spec in specs], instrument.current())
    text = plan_json(plan)
    done = time.perf_counter()
    io.StringIO().write(text)
    return done - started, done - loaded, json.loads(text)


def cli_env() -> dict[str, str]:
    """The environment of every fresh ``ouro`` process a benchmark runs: from compiled
    byte code, as an installed ouro runs (pip compiles it at install), written under the
    temp folder's ouro-bench/pycache by the first run, never into the checkout; an
    inherited PYTHONDONTWRITEBYTECODE would have every run compile ouro's sources again
    (bench/startup.py: that measures the compiler)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(OUT / "pycache")
    return env


def load_average() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def cli(root: Path) -> tuple[float, int, float]:
    """Wall seconds, exit code and CPU seconds (user + system) of `ouro plan --json`."""
    cpu = children_cpu()
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", PIN, "plan",
         str(root / "specs"), "--json"],
        cwd=ROOT, capture_output=True, check=False, env=cli_env(),
    )
    return time.perf_counter() - started, result.returncode, children_cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lineages", type=int, default=100)
    parser.add_argument("--generations", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layout", choices=("loose", "packed"), default="loose",
                        help="loose objects, as ouro's kernel (pygit2) writes them; or packed, "
                        "as after `git gc`")
    parser.add_argument("--shared", action="store_true",
                        help="build the first lineage only; the others are copies of it "
                        "with hard-linked objects (what makes --lineages 1000 cheap: ~1 GB "
                        "and minutes, not ~45 GB and hours)")
    options = parser.parse_args()
    instrument._fingerprint = lambda: BENCH_FINGERPRINT  # type: ignore[assignment]
    root = build_fleet(options.lineages, options.generations, options.layout, options.shared)
    names = sorted(p.stem for p in (root / "specs").glob("*.yaml"))
    print(f"fleet: {len(names)} lineages x {options.generations} generations, "
          f"{options.layout} objects, at {root} "
          f"(built in {(root / '.complete').read_text().strip()})")

    base = [baseline(root, names, options.shared) for _ in range(options.rounds)]
    whole, plan_only, document = zip(*(in_process(root) for _ in range(options.rounds)),
                                     strict=True)
    cli(root)  # warm-up: byte code written, records of the observed lineages kept
    before = load_average()
    ends = [cli(root) for _ in range(options.rounds)]
    print(f"load average before/after the CLI runs: {before} / {load_average()}")

    problems = []
    for item in document[-1]["lineages"]:
        if (item["action"], item["observed_generations"]) != ("in-sync", options.generations):
            problems.append(f"{item['name']}: {item['action']} {item['reason']} "
                            f"{item['observed_generations']}")
    if any(code != 0 for _, code, _ in ends):
        problems.append(f"ouro plan exited {[code for _, code, _ in ends]}, expected 0 "
                        "(in sync)")

    # Best of the rounds for every contender alike: this machine is shared, and the
    # minimum is the figure least disturbed by other work.
    b, w, p, c = min(base), min(whole), min(plan_only), min(t for t, _, _ in ends)
    cpu = min(used for _, _, used in ends)
    count = len(names)
    print(f"baseline, the original kernel's check (3 git subprocesses per lineage): "
          f"{b:.3f} s ({b / count * 1000:.2f} ms per lineage)")
    print(f"ouro: observe + plan + JSON of every lineage (the same job): {p:.3f} s "
          f"({p / count * 1000:.2f} ms per lineage)  ratio {b / p:.1f}x")
    print(f"ouro: whole plan in-process (+ loading {count} spec files): {w:.3f} s  "
          f"ratio {b / w:.1f}x  (spec loading {w - p:.3f} s)")
    print(f"ouro: `ouro plan --json` end to end (fresh process, imports included): {c:.3f} s "
          f"(CPU {cpu:.3f} s)  ratio {b / c:.1f}x")
    # Issue 21: 100 lineages in under 1 s, in process and from the command line; 1,000
    # (x 1,000 generations, --shared) from the command line in under 2 s.
    whole_met = w < TARGET_SECONDS or count >= 1000
    limit = TARGET_SECONDS * (2 if count >= 1000 else 1)
    met = whole_met and b / p >= TARGET_RATIO and c < limit
    print(f"targets: whole plan in-process < {TARGET_SECONDS:.0f} s "
          f"({'met' if w < TARGET_SECONDS else 'MISSED'}"
          f"{'; no target at 1,000 lineages' if count >= 1000 else ''}); lineage checking "
          f">= {TARGET_RATIO:.0f}x the baseline "
          f"({'met' if b / p >= TARGET_RATIO else 'MISSED'}); `ouro plan --json` end to end "
          f"(what a user waits for) < {limit:.0f} s ({'met' if c < limit else 'MISSED'})")
    for line in problems[:10]:
        print(f"WRONG PLAN: {line}")
    return 0 if met and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
