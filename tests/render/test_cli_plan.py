"""`ouro plan` and `ouro status` end to end: exit codes, outputs, and plan writes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.kernel.base.config import LineagePaths
from reconciler.plan.saved import check_fresh, load_plan
from reconciler.state import instrument
from reconciler.state.cachefile import KEY_FILE
from reconciler.state.observe import observe
from reconciler.state.summaries import CACHE_DIR
from tests.inprocess import ouro
from tests.observe.builder import LineageBuilder, lineage_paths
from tests.plan.helpers import spec_yaml, write_specs

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleets here are openai lineages: plan refuses those it could not run unkeyed."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-plan")


run = ouro


def _lineage(root: Path, name: str, generations: int) -> LineageBuilder:
    builder = LineageBuilder(root, name, identity=instrument.current())
    for _ in range(generations):
        builder.gen()
    return builder


def _snapshot(*roots: Path) -> dict[str, str]:
    """Every file (and symlink) under the roots, with a digest of its bytes and its mode."""
    found: dict[str, str] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                stat = path.lstat()
                data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
                found[str(path)] = f"{stat.st_mode:o}:{hashlib.sha256(data).hexdigest()}"
    return found


@pytest.mark.parametrize(
    ("have", "want", "code"),
    [(2, 2, 0), (1, 3, 2), (3, 1, 0)],
    ids=["in-sync-exit-0", "extend-exit-2", "ahead-exit-0"],
)
def test_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str], have: int, want: int, code: int) -> None:
    builder = _lineage(tmp_path, "x", have)
    specs = write_specs(tmp_path / "specs", spec_yaml("x", builder.paths, generations=want))
    assert run(monkeypatch, capsys, "plan", specs)[0] == code


def test_refusal_exits_1_and_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    builder = _lineage(tmp_path, "x", 2)
    builder.drop_observation(2)
    specs = write_specs(tmp_path / "specs", spec_yaml("x", builder.paths, generations=4))
    code, out, _ = run(monkeypatch, capsys, "plan", specs)
    assert code == 1
    assert "! x" in out and "unbalanced" in out and "ouro verify" in out


def test_spec_error_exits_1_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: ouro/v1\nkind: Lineage\n", encoding="utf-8")
    code, _out, err = run(monkeypatch, capsys, "plan", bad)
    assert code == 1 and "Traceback" not in err and "bad.yaml" in err


def test_json_and_markdown_are_exclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = write_specs(tmp_path / "specs", spec_yaml("x", lineage_paths(tmp_path, "x"),
                                                      generations=1))
    code, _, err = run(monkeypatch, capsys, "plan", specs, "--json", "--markdown")
    assert code == 2 and "cannot be used together" in err  # a usage error


def _fleet(tmp_path: Path) -> tuple[Path, list[LineagePaths]]:
    synced = _lineage(tmp_path, "synced", 2)
    behind = _lineage(tmp_path, "behind", 1)
    broken = _lineage(tmp_path, "broken", 2)
    broken.observe(1, "ab" * 20)  # rewrites observation 1 to name a foreign commit
    broken.gen(move_branch=False)  # and leaves a roll-forward: refusal must win
    (behind.paths.worktree / "organism.el").write_text("(hand edit)\n", encoding="utf-8")
    specs = write_specs(
        tmp_path / "specs",
        spec_yaml("synced", synced.paths, generations=2),
        spec_yaml("behind", behind.paths, generations=3, budget="0.40"),
        spec_yaml("broken", broken.paths, generations=3),
        spec_yaml("fresh", lineage_paths(tmp_path, "fresh"), generations=2),
    )
    return specs, [synced.paths, behind.paths, broken.paths]


def test_plan_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    specs, _ = _fleet(tmp_path)
    before = _snapshot(tmp_path)
    for flags in ((), ("--json",), ("--markdown",)):
        run(monkeypatch, capsys, "plan", specs, *flags)
    run(monkeypatch, capsys, "status", specs)
    run(monkeypatch, capsys, "status", specs, "--json")
    # status may write only its derived, deletable summary cache in the state dir, and the
    # state dir's key that seals it (made on first use, issue 23)
    after = {path: mode for path, mode in _snapshot(tmp_path).items()
             if f"/{CACHE_DIR}" not in path
             and path not in (str(tmp_path / "state"), str(tmp_path / "state" / KEY_FILE))}
    assert after == before
    assert not (tmp_path / "fresh").exists()


def test_plan_json_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    specs, _ = _fleet(tmp_path)
    code, out, _ = run(monkeypatch, capsys, "plan", specs, "--json")
    document = json.loads(out)
    assert code == 1 and document["format_version"] == 1
    by_name = {item["name"]: item for item in document["lineages"]}
    assert by_name["synced"]["action"] == "in-sync"
    assert (by_name["behind"]["action"], by_name["behind"]["missing_generations"],
            by_name["behind"]["max_spend_usd"]) == ("extend", 2, "0.80")
    assert any("uncommitted edits" in note for note in by_name["behind"]["notes"])
    assert (by_name["broken"]["action"], by_name["broken"]["reason"]) == (
        "refuse", "observation-disagrees")
    assert by_name["broken"]["observed_generations"] == 2
    assert (by_name["fresh"]["action"], by_name["fresh"]["max_spend_usd"]) == ("create", "2.00")
    assert document["summary"]["max_spend_usd"] == "2.80"


def test_markdown_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    specs, _ = _fleet(tmp_path)
    _, out, _ = run(monkeypatch, capsys, "plan", specs, "--markdown")
    assert out.index("#### ! refuse") < out.index("#### + create")


def test_saved_plan_goes_stale_when_a_head_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    builder = _lineage(tmp_path, "x", 1)
    specs = write_specs(tmp_path / "specs", spec_yaml("x", builder.paths, generations=3))
    out = tmp_path / "plan.json"
    code, _, _ = run(monkeypatch, capsys, "plan", specs, "-o", out)
    assert code == 2
    saved = load_plan(out)
    assert saved.lineages[0].spec_file == str(specs)
    assert check_fresh(saved, {"x": observe(builder.paths)}, instrument=instrument.current()) == []
    builder.gen()
    stale = check_fresh(saved, {"x": observe(builder.paths)})
    assert stale and stale[0].startswith("lineage x: refs/heads/lineage-x moved")


def test_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> None:
    builder = LineageBuilder(tmp_path, "x", identity=instrument.current())
    call = {"accounted_usd": "0.125", "http_status": 200}
    builder.gen("changed", calls=[call, {**call, "accounted_usd": "0.25"}])
    builder.gen("died", outcome="wall_timeout", calls=[call])
    builder.gen("died")
    builder.external_edit()
    builder.gen()
    specs = write_specs(tmp_path / "specs", spec_yaml("x", builder.paths, generations=9))
    code, out, _ = run(monkeypatch, capsys, "status", specs, "--json")
    assert code == 0
    (line,) = json.loads(out)["lineages"]
    assert line["generations"] == 4
    assert line["outcomes"] == {"changed": 1, "no-change": 1, "died": 2}
    assert line["death_kinds"] == {"process_exit": 1, "wall_timeout": 1}
    assert line["accounted_usd"] == "0.500"
    assert line["last_journal_heading"].startswith("## gen 4 — no-change — ")
    assert line["heads"]["lineage"] == builder.head
    code, text, _ = run(monkeypatch, capsys, "status", specs)
    assert code == 0 and "x: 4 generations" in text and "$0.500" in text


def test_status_of_the_original_fixture(
    tmp_path: Path, original_lineage: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    paths = LineagePaths(original_lineage, tmp_path / "fixture.git",
                         tmp_path / "fixture.observations", "lineage-fixture",
                         "observations/lineage-fixture")
    specs = write_specs(tmp_path / "specs", spec_yaml("fixture", paths, generations=5,
                                                      provider="openai", model="gpt-5.6"))
    code, out, _ = run(monkeypatch, capsys, "status", specs, "--json")
    (line,) = json.loads(out)["lineages"]
    assert (code, line["generations"], line["observed_generations"]) == (0, 5, 5)
    assert line["death_kinds"] == {"process_exit": 1}
    assert line["outcomes"] == {"changed": 0, "no-change": 4, "died": 1}


def test_cli_as_a_process(tmp_path: Path) -> None:
    """The installed entry point path: a real process, real exit code."""
    builder = _lineage(tmp_path, "x", 1)
    specs = write_specs(tmp_path / "specs", spec_yaml("x", builder.paths, generations=1))
    result = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli import main; main()", "plan", str(specs)],
        cwd=REPO_ROOT, capture_output=True, text=True, env=os.environ.copy(), check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "= x" in result.stdout and "1 in sync" in result.stdout


def test_kernel_born_lineage_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lineage born by the kernel's init_lineage plans as extend, and plan leaves it be."""
    from reconciler.kernel.transaction.lineage import init_lineage

    paths = lineage_paths(tmp_path, "born")
    init_lineage(paths, instrument.current())
    specs = write_specs(tmp_path / "specs", spec_yaml("born", paths, generations=2))
    before = _snapshot(paths.worktree, paths.git_dir, paths.observations)
    code, out, _ = run(monkeypatch, capsys, "plan", specs, "--json")
    (item,) = json.loads(out)["lineages"]
    assert (code, item["action"], item["missing_generations"], item["reason"]) == (
        2, "extend", 2, None)
    code, out, _ = run(monkeypatch, capsys, "status", specs, "--json")
    (line,) = json.loads(out)["lineages"]
    assert (code, line["generations"], line["problems"]) == (0, 0, [])
    assert _snapshot(paths.worktree, paths.git_dir, paths.observations) == before
