#!/usr/bin/env python3
"""Benchmark what grew: `status` over a fleet, `log`, `verify` and the viewer's first paint.

One command: `python bench/history_bench.py [--lineages N] [--generations G] [--rounds R]
[--skip-browser] [--only verify|status]`. The fleet is plan_bench's (100 lineages x
1,000 generations by default, built once under bench/out/ and shared with plan_bench;
`--lineages 10` for a quick run). Two more lineages (1,000 and 2,000 generations) are built for
`verify`. Measured in the same run, best of R rounds:

- status: the baseline is what `ouro status` did before summaries (walk every
  generation commit and read every observation, as the old read_status did,
  reproduced here) plus observe; cold is `ouro status`'s work with its caches
  deleted (summaries and observed records: it rebuilds and writes them); warm is
  the same with them. Targets (issue 21): warm < 0.2 s; cold < 1 s.
  `--only status` runs this part alone.
- log: `ouro log NAME` of a 1,000-generation lineage, warm, in-process and as a
  fresh process. Target: in-process < 0.3 s (the process adds Python's start-up).
- verify: the audit of a 1,000- and a 2,000-generation lineage, in-process, three
  ways: in full (no recorded verdict, or `--full`: every object read, the one
  cost that grows with the square, as `git fsck` on loose objects); resumed
  from the last clean verdict with nothing new (a second `ouro verify`); and
  resumed after 10 more generations (the audit after an apply).
  Targets, for the resumed audits: 1,000 < 0.5 s; 2,000 <= 2.2x 1,000.
  `--only verify` runs this part alone (no fleet is built).
- viewer: `ouro view` serving the fleet's specs; headless Chromium loads a
  1,000-generation lineage's page; first contentful paint from the browser's own
  paint timing. Target < 1 s.

Exits 1 if a target is missed or a result is wrong.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import plan_bench  # noqa: E402  (sets OURO_INSTRUMENT_COMMIT to the fleet's)
import pygit2  # noqa: E402

from reconciler.kernel.base import formats  # noqa: E402
from reconciler.state import instrument  # noqa: E402

OUT = ROOT / "bench" / "out"
MAIN = (plan_bench.PIN.removesuffix("console_main()")
        + "import sys; sys.argv[0] = 'ouro'; console_main()")


def best(rounds: int, action: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return min(times), result


# ---------------------------------------------------------------- status


def old_status(paths: Any) -> tuple[int, Decimal]:
    """What read_status did before summaries: every commit, every observation, the journal."""
    repo = pygit2.Repository(str(paths.git_dir))
    commit = repo.references[f"refs/heads/{paths.branch}"].peel(pygit2.Commit)
    journal = bytes(repo[commit.tree["journal.md"].id].data).decode("utf-8", errors="replace")
    formats.last_heading_line(journal)
    count = 0
    while True:
        if formats.is_generation_subject(commit.message.split("\n", 1)[0]):
            count += 1
        if not commit.parents:
            break
        commit = commit.parents[0]
    obs = pygit2.Repository(str(paths.observations))
    head = obs.references[f"refs/heads/{paths.observation_branch}"].peel(pygit2.Commit)
    spend = Decimal(0)
    for entry in obs[head.tree["generations"].id]:
        record = json.loads(bytes(obs[entry.id].data).decode("utf-8"))
        spend += formats.calls_spend(record.get("model_calls"))
    return count, spend


def status_baseline(root: Path) -> int:
    from reconciler.spec.load import load_specs
    from reconciler.state.observe import observe

    total = 0
    for spec in load_specs([root / "specs"]):
        paths = spec.paths()
        observe(paths)
        total += old_status(paths)[0]
    return total


def status_now(root: Path, cache: Path) -> int:
    from reconciler.report.render import StatusLine, status_json
    from reconciler.spec.load import load_specs
    from reconciler.state.observe import observe
    from reconciler.state.status import read_status

    lines = []
    for spec in load_specs([root / "specs"]):
        paths = spec.paths()
        lines.append(StatusLine(spec.name, read_status(paths, observe(paths, cache), cache)))
    io.StringIO().write(status_json(lines))
    return sum(line.report.generations for line in lines)


# ---------------------------------------------------------------- log, verify


def log_now(paths: Any, cache: Path) -> int:
    from reconciler.report.log import log_text
    from reconciler.state.summaries import summarize
    from reconciler.state.table import GenerationTable, lineage_table

    summary = summarize(paths, cache)
    table = GenerationTable((lineage_table(summary.name, paths, summary),))
    io.StringIO().write(log_text(table))
    return summary.generations


def ouro(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=ROOT, capture_output=True,
                          text=True, check=False, env=env)


NEW = 10  # generations an apply adds after the recorded verdict, for the resumed audit


def verify_lineage(generations: int) -> Any:
    """A sound lineage of ``generations`` + NEW generations."""
    from reconciler.spec.load import default_places

    root = OUT / f"history-v{plan_bench.FORMAT}-verify-G{generations}"
    name = f"v{generations}"
    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        plan_bench.build_lineage((root, name, generations + NEW, 0, "loose"))
        (root / ".complete").write_text("built\n")
    return default_places(root / name, name)


def _refs(paths: Any) -> tuple[pygit2.Reference, pygit2.Reference]:
    lineage = pygit2.Repository(str(paths.git_dir))
    observations = pygit2.Repository(str(paths.observations))
    return (lineage.references[f"refs/heads/{paths.branch}"],
            observations.references[f"refs/heads/{paths.observation_branch}"])


def verify_case(generations: int, rounds: int) -> dict[str, tuple[float, Any]]:
    """The audit of a ``generations``-long lineage: in full (no record: every object read),
    resumed with nothing new, and resumed after NEW more generations (an apply's audit)."""
    from reconciler.state.audit_record import audit_recorded, record_file

    paths = verify_lineage(generations)
    records = OUT / f"history-v{plan_bench.FORMAT}-verify-G{generations}" / "state" / ".audits"
    shutil.rmtree(records, ignore_errors=True)
    lineage_ref, observation_ref = _refs(paths)
    tips = (lineage_ref.target, observation_ref.target)
    observations = pygit2.Repository(str(paths.observations))
    commit = observations[tips[1]]
    for _ in range(NEW):  # back to the heads of generation `generations`
        commit = commit.parents[0]
    blob = observations[(commit.tree / formats.observation_path(generations)).id]
    lineage_ref.set_target(pygit2.Oid(hex=json.loads(bytes(blob.data))["lineage_commit"]))
    observation_ref.set_target(commit.id)
    try:
        audit = lambda **kw: audit_recorded(paths, paths.name, records, **kw)  # noqa: E731
        found = {"full": best(rounds, lambda: audit(full=True)),
                 "unchanged": best(rounds, audit)}
        recorded = record_file(records, paths).read_bytes()
    finally:
        lineage_ref.set_target(tips[0])
        observation_ref.set_target(tips[1])

    def resumed() -> Any:
        record_file(records, paths).write_bytes(recorded)
        return audit()

    found["new"] = best(rounds, resumed)
    return found


# ---------------------------------------------------------------- viewer


def first_paint(root: Path, name: str, rounds: int) -> float:
    from tests.viewer.chromium import launch, present

    if not present():
        raise SystemExit("the viewer's paint needs Debian's chromium and chromium-driver "
                         "(apt-get install chromium chromium-driver), or --skip-browser")

    env = dict(os.environ, OURO_STATE_DIR=str(root / "state"))
    process = subprocess.Popen([sys.executable, "-c", MAIN, "view", str(root / "specs")],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    match = re.search(r"(http://\S+)/\?token=(\S+)", process.stdout.readline())
    assert match, "ouro view printed no URL"
    profile = OUT / "history-v1-chromium-profile"
    shutil.rmtree(profile, ignore_errors=True)
    driver = launch(profile)
    paints = []
    try:
        for _ in range(rounds):
            driver.get(f"{match[1]}/lineage/{name}?token={match[2]}")
            paint = driver.execute_script(
                "const p = performance.getEntriesByName('first-contentful-paint');"
                "return p.length ? p[0].startTime : null;")
            rows = driver.execute_script(
                "return document.querySelectorAll('tr.generation').length")
            assert paint is not None and rows > 0, (paint, rows)
            paints.append(float(paint) / 1000)
    finally:
        driver.quit()
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
    return min(paints)


def verify_all(rounds: int, missed: list[str]) -> list[str]:
    problems = []
    cases = {count: verify_case(count, rounds) for count in (1000, 2000)}
    for count, found in cases.items():
        expected = {"full": (0, count), "unchanged": (count, count), "new": (count, count + NEW)}
        for kind, (_, audit) in found.items():
            if (audit.status, (audit.resumed, audit.generations)) != ("consistent", expected[kind]):
                problems.append(f"verify {count} {kind}: {audit.status}, resumed "
                                f"{audit.resumed}, {audit.generations} generations")
    for kind, what in (("full", "in full (no record: every object read, as git fsck)"),
                       ("unchanged", "resumed, nothing new (a second `ouro verify`)"),
                       ("new", f"resumed, {NEW} new generations (apply's audit)")):
        one, two = cases[1000][kind][0], cases[2000][kind][0]
        print(f"verify {what}: 1,000 generations {one:.3f} s; 2,000 {two:.3f} s, "
              f"ratio {two / one:.2f}x")
    for kind in ("unchanged", "new"):
        one, two = cases[1000][kind][0], cases[2000][kind][0]
        if one >= 0.5:
            missed.append(f"verify ({kind}) 1,000 < 0.5 s")
        if two > 2.2 * one:
            missed.append(f"verify ({kind}) 2,000 <= 2.2x 1,000")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lineages", type=int, default=100)
    parser.add_argument("--generations", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-browser", action="store_true")
    parser.add_argument("--only", choices=["verify", "status"], help="run this part alone")
    options = parser.parse_args()
    instrument._fingerprint = lambda: plan_bench.BENCH_FINGERPRINT  # type: ignore[assignment]
    if options.only == "verify":
        missed = []
        return _verdict(verify_all(options.rounds, missed), missed)
    root = plan_bench.build_fleet(options.lineages, options.generations, "loose")
    cache = root / "state" / ".summaries"
    names = sorted(p.stem for p in (root / "specs").glob("*.yaml"))
    expected = len(names) * options.generations
    print(f"fleet: {len(names)} lineages x {options.generations} generations at {root}")
    problems, missed = [], []

    base, counted = best(options.rounds, lambda: status_baseline(root))
    colds = []
    for _ in range(options.rounds):
        shutil.rmtree(cache, ignore_errors=True)
        colds.append(best(1, lambda: status_now(root, cache)))
    cold, cold_count = min(colds)
    warm, warm_count = best(options.rounds, lambda: status_now(root, cache))
    if not counted == cold_count == warm_count == expected:
        problems.append(f"status counted {counted}/{cold_count}/{warm_count}, not {expected}")
    env = dict(os.environ, OURO_STATE_DIR=str(root / "state"))
    cli = {}
    for kind in ("cold", "warm"):
        times = []
        for _ in range(options.rounds):
            if kind == "cold":
                shutil.rmtree(cache, ignore_errors=True)
            took, result = best(1, lambda: ouro("status", str(root / "specs"), "--json",
                                                env=env))
            times.append(took)
            shown = json.loads(result.stdout) if result.returncode == 0 else {}
            if sum(line.get("generations", 0) for line in shown.get("lineages", [])) != expected:
                problems.append(f"`ouro status --json` {kind}: exit {result.returncode}, not "
                                f"{expected} generations {result.stderr[-300:]}")
        cli[kind] = min(times)
    print(f"status: baseline (every observation read, as before) {base:.3f} s; "
          f"cold (caches rebuilt) {cold:.3f} s, ratio {cold / base:.2f}x; warm {warm:.3f} s "
          f"({base / warm:.1f}x faster); `ouro status --json` as a fresh process (imports "
          f"included): cold {cli['cold']:.3f} s, warm {cli['warm']:.3f} s")
    if warm >= 0.2:
        missed.append("status warm < 0.2 s")
    if cold >= 1.0:
        missed.append("status cold < 1 s")
    if options.only == "status":
        return _verdict(problems, missed)

    paths = next(spec.paths() for spec in __import__(
        "reconciler.spec.load", fromlist=["load_specs"]).load_specs([root / "specs"]))
    log_warm, generations = best(options.rounds, lambda: log_now(paths, cache))
    log_cli, result = best(options.rounds, lambda: ouro(
        "log", names[0], "--specs", str(root / "specs" / f"{names[0]}.yaml"), env=env))
    if generations != options.generations or result.returncode != 0:
        problems.append(f"log: {generations} rows, exit {result.returncode} {result.stderr}")
    print(f"log of {generations} generations, warm: in-process {log_warm:.3f} s; "
          f"`ouro log`, fresh process {log_cli:.3f} s")
    if log_warm >= 0.3:
        missed.append("log warm < 0.3 s")

    problems += verify_all(options.rounds, missed)

    if not options.skip_browser:
        paint = first_paint(root, names[0], options.rounds)
        print(f"viewer: {options.generations}-generation lineage page, first contentful "
              f"paint in Chromium {paint:.3f} s")
        if paint >= 1.0:
            missed.append("viewer first paint < 1 s")

    return _verdict(problems, missed)


def _verdict(problems: list[str], missed: list[str]) -> int:
    for line in problems:
        print(f"WRONG: {line}")
    print("targets: " + ("all met" if not missed else "MISSED: " + "; ".join(missed)))
    return 0 if not missed and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
