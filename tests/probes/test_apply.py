"""plan shows the measurement work; apply measures new generations and back-fills."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from reconciler.state import probes as stored
from tests.apply.helpers import assert_invariant, refs, report, run_ouro, write_spec
from tests.observe.builder import lineage_paths

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

PROBES = """\
  probes:
    - name: size
      run: [/bin/sh, /probe/size.sh]
      files: probes/size
      ceilings: {wall: 20s, cpu: 5s, memory: 256MiB}
"""
SIZE = 'printf \'{"bytes": %d, "loads": true}\' "$(wc -c < organism.el)"\n'


def with_probe(specs: Path, name: str, generations: int, script: str = SIZE) -> Path:
    path = write_spec(specs, name, generations)
    (specs / "probes" / "size").mkdir(parents=True, exist_ok=True)
    (specs / "probes" / "size" / "size.sh").write_text(script)
    path.write_text(path.read_text() + PROBES)
    return path


def plan_json(specs: Path, env: dict[str, str]) -> dict[str, object]:
    result = run_ouro("plan", "--json", str(specs), env=env)
    assert result.returncode in (0, 2), result.stderr
    document: dict[str, object] = json.loads(result.stdout)
    return document


def test_apply_measures_every_generation_and_plan_shows_the_work(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    write_spec(specs, "alpha", 2)
    first = run_ouro("apply", "--yes", str(specs), env=env)
    assert first.returncode == 0, first.stderr
    paths = lineage_paths(tmp_path / "state", "alpha")
    observations_before = refs(paths)
    with_probe(specs, "alpha", 3)  # a probe added afterwards: history is measured too
    planned = run_ouro("plan", str(specs), env=env)
    assert planned.returncode == 2, planned.stderr
    # generations 1..3 and the seed (generation 0)
    assert "measure: 4 (generation, probe) pair(s) of 1 probe(s), at most 20 CPU seconds" \
        in planned.stdout, planned.stdout
    applied = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert applied.returncode == 0, applied.stderr
    lineage = report(applied)["lineages"][0]
    assert (lineage["generations_run"], lineage["measured"], lineage["probe_failures"]) == (1, 4,
                                                                                           0)
    assert_invariant(paths, 3)
    found = stored.records(paths)
    assert [r.generation for r in found] == [0, 1, 2, 3]
    assert all(r.record["metrics"]["loads"] is True for r in found)
    after = refs(paths)
    # the observation branch moved only by the new generation; the records have their own
    assert set(after) - set(observations_before) == {
        f"{paths.observations.name}:refs/heads/probes/lineage-alpha"}
    again = run_ouro("plan", "--json", str(specs), env=env)
    assert again.returncode == 0, again.stdout
    assert json.loads(again.stdout)["lineages"][0]["measure"]["measurements"] == 0
    assert_history_columns(env, [r.record["metrics"]["bytes"] for r in found])


def assert_history_columns(env: dict[str, str], sizes: list[int]) -> None:
    exported = run_ouro("export", "alpha", "--format", "csv", env=env)
    assert exported.returncode == 0, exported.stderr
    table = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert [(row["probe.size.bytes"], row["probe.size.loads"]) for row in table] == [
        (str(size), "True") for size in sizes]
    assert list(table[0])[-3:] == ["probe.size.bytes", "probe.size.loads", "probe_failure.size"]
    assert all(row["probe_failure.size"] == "" for row in table)  # measured, none failed
    lines = run_ouro("export", "alpha", "--format", "jsonl", env=env).stdout.splitlines()
    assert [json.loads(line)["probe.size.bytes"] for line in lines] == sizes
    logged = json.loads(run_ouro("log", "alpha", "--json", env=env).stdout)
    assert [row["probe.size.loads"] for row in logged["lineages"][0]["rows"]] == [True] * 4
    text = run_ouro("log", "alpha", env=env).stdout
    assert "probe.size.bytes" in text.splitlines()[1], text
    shown = run_ouro("show", "alpha", "2", env=env).stdout
    assert f"probe.size.bytes = {sizes[2]}, probe.size.loads = true" in shown, shown
    document = json.loads(run_ouro("show", "alpha", "2", "--json", env=env).stdout)
    assert document["probes"][0]["metrics"] == {"bytes": sizes[2], "loads": True}


def test_a_probe_failure_is_recorded_never_the_lineages(specs: Path, env: dict[str, str],
                                                        tmp_path: Path) -> None:
    with_probe(specs, "beta", 2, script="exit 7\n")
    applied = run_ouro("apply", "--yes", "--json", str(specs), env=env)
    assert applied.returncode == 0, applied.stderr
    lineage = report(applied)["lineages"][0]
    assert lineage["outcomes"] == {"no-change": 2} and lineage["errors"] == []
    assert (lineage["measured"], lineage["probe_failures"]) == (3, 3)  # the seed's too
    paths = lineage_paths(tmp_path / "state", "beta")
    assert {r.record["failure"] for r in stored.records(paths)} == {"exit status 7"}
    assert run_ouro("plan", str(specs), env=env).returncode == 0  # measured: nothing to do


def _rewrite(paths: object, edit: str) -> None:
    """Replace a record (or the digest's probe.json) on probes/<branch>, as a tamperer."""
    import pygit2

    repo = pygit2.Repository(str(paths.observations))  # type: ignore[attr-defined]
    ref = repo.references["refs/heads/probes/lineage-beta"]
    head = repo[ref.target]
    root = head.tree
    (digest_entry,) = list(root)
    folder = repo[digest_entry.id]
    builder = repo.TreeBuilder(folder)
    if edit == "commit":
        generations = repo[folder["generations"].id]
        record = json.loads(repo[generations["000001.json"].id].data)
        record["commit"] = "0" * 40
        inner = repo.TreeBuilder(generations)
        inner.insert("000001.json", repo.create_blob(json.dumps(record).encode()),
                     pygit2.enums.FileMode.BLOB)
        builder.insert("generations", inner.write(), pygit2.enums.FileMode.TREE)
    else:
        probe = json.loads(repo[folder["probe.json"].id].data)
        probe["body"]["run"] = ["/bin/true"]
        builder.insert("probe.json", repo.create_blob(json.dumps(probe).encode()),
                       pygit2.enums.FileMode.BLOB)
    top = repo.TreeBuilder(root)
    top.insert(digest_entry.name, builder.write(), pygit2.enums.FileMode.TREE)
    signature = pygit2.Signature("t", "t@invalid")
    oid = repo.create_commit(None, signature, signature, "tamper", top.write(), [head.id])
    ref.set_target(oid)


@pytest.mark.parametrize("edit", ["commit", "digest"])
def test_verify_checks_probe_records(specs: Path, env: dict[str, str], tmp_path: Path,
                                     edit: str) -> None:
    with_probe(specs, "beta", 2)
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    clean = run_ouro("verify", "--json", str(specs), env=env)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    _rewrite(lineage_paths(tmp_path / "state", "beta"), edit)
    found = run_ouro("verify", "--json", "--full", str(specs), env=env)
    assert found.returncode == 1, found.stdout
    codes = {f["code"] for f in json.loads(found.stdout)["lineages"][0]["findings"]}
    assert codes == {f"probe-record-{edit}"}, found.stdout
