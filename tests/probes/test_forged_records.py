"""A forged probe record is believed by no reader (issue 36, item 5): a record on
``probes/<branch>`` holding Infinity, NaN, an HTML probe name or a 300-character one --
all of which ouro's own writer refuses -- is named by ``ouro verify`` (exit 1, the
generation and the rule), and ``plan`` does not report ``target-reached`` from it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.state.probe_rules import record_problem
from tests.apply.helpers import run_ouro
from tests.probes.test_until import spec

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

# n is 0 in every real generation: `until: n >= 5` never holds on what ouro measured.
ZERO = "printf '{\"n\": 0}'"


def _forge(observations: Path, branch: str, edits: dict[int, dict[str, Any] | str]) -> None:
    """What the attacker did: one commit on probes/<branch> replacing generation records
    (a dict: its fields changed; a string: the record's raw text), as ouro's writer words
    its commits."""
    repo = pygit2.Repository(str(observations))
    ref = repo.references[f"refs/heads/probes/{branch}"]
    parent = repo[ref.target]
    root = parent.peel(pygit2.Tree)
    [digest] = [item.name for item in root if item.type_str == "tree"]
    folder = repo[root[digest].id]
    generations = repo[folder["generations"].id]
    inner = repo.TreeBuilder(generations)
    for number, edit in edits.items():
        name = f"{number:06d}.json"
        if isinstance(edit, str):
            text = edit
        else:
            record = json.loads(generations[name].data)
            record.update(edit)
            text = json.dumps(record, allow_nan=True)
        inner.insert(name, repo.create_blob(text.encode()), pygit2.enums.FileMode.BLOB)
    middle = repo.TreeBuilder(folder)
    middle.insert("generations", inner.write(), pygit2.enums.FileMode.TREE)
    top = repo.TreeBuilder(root)
    top.insert(digest, middle.write(), pygit2.enums.FileMode.TREE)
    signature = pygit2.Signature("ouro", "ouro@invalid", int(time.time()), 0)
    oid = repo.create_commit(None, signature, signature, f"probe gen {digest[:12]}: gen 1\n",
                             top.write(), [parent.id])
    ref.set_target(oid)


FORGERIES: dict[str, tuple[dict[int, dict[str, Any] | str], str]] = {
    "infinity": ({1: '{"probe": "gen", "metrics": {"n": Infinity}, "failure": null, '
                     '"generation": 1}'}, "probe-record-number"),
    "nan": ({1: {"metrics": {"n": float("nan"), "m": 9}}}, "probe-record-number"),
    "html-name": ({2: {"probe": "<img src=x onerror=alert(1)>", "metrics": {"n": 99}}},
                  "probe-record-name"),
    "long-name": ({2: {"probe": "g" * 300, "metrics": {"n": 99}}}, "probe-record-name"),
    "html-metric": ({2: {"metrics": {"<b>n</b>": 1, "n": 99}}}, "probe-record-metric-name"),
}


@pytest.mark.parametrize("case", list(FORGERIES))
def test_a_forged_record_is_named_by_verify_and_believed_by_no_plan(
        case: str, specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    path = spec(specs, "forged", "{probe: gen, metric: n, at_least: 5}", script=ZERO,
                generations=2)
    applied = run_ouro("apply", "--yes", str(specs), env=env)
    assert applied.returncode == 0, applied.stderr
    assert run_ouro("verify", str(specs), env=env).returncode == 0
    edits, code = FORGERIES[case]
    lineage = tmp_path / "state" / "forged"
    _forge(lineage.with_name("forged.observations"), _branch(lineage), edits)
    path.write_text(path.read_text().replace("generations: 2", "generations: 6"))

    verified = run_ouro("verify", str(specs), env=env)
    assert verified.returncode == 1, verified.stdout
    number = next(iter(edits))
    assert f"gen {number}: {code}:" in verified.stdout, verified.stdout

    planned = run_ouro("plan", "--json", str(specs), env=env)
    [item] = json.loads(planned.stdout)["lineages"]
    assert item["action"] == "extend" and item.get("until") is None, item
    assert "target-reached" not in run_ouro("status", str(specs), env=env).stdout


def _branch(lineage: Path) -> str:
    repo = pygit2.Repository(str(lineage.with_name("forged.observations")))
    [found] = [name.removeprefix("probes/") for name in repo.branches.local
               if name.startswith("probes/")]
    return found


def test_the_writer_keeps_the_rules_the_readers_check() -> None:
    written = {"probe": "gen", "digest": "d", "generation": 1, "commit": "c",
               "metrics": {"n": 1.5, "ok": True, "s": "x"}, "failure": None, "exit": 0,
               "wall_ms": 3, "cpu_ms": None, "peak_memory_bytes": 1 << 20,
               "stderr_tail": "warning: \x1b[1mbold\n"}
    assert record_problem(written) is None
    failed = {**written, "metrics": None, "failure": "exit status 1"}
    assert record_problem(failed) is None
    assert record_problem({**written, "wall_ms": float("inf")})[0] == "number"  # type: ignore[index]
    assert record_problem({**written, "metrics": {"n": "x" * 257}})[0] == "size"  # type: ignore[index]
    assert record_problem({**written, "probe": "gen\n"})[0] == "name"  # type: ignore[index]
    assert record_problem({**written, "metrics": {"n\n": 1}})[0] == "metric-name"  # type: ignore[index]
