"""`ouro validate` and `ouro schema`, and the specs shipped in specs/ and examples/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.spec.load import load_specs

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*(REPO / "specs").glob("*.yaml"), *(REPO / "examples").glob("*.yaml")])
VALID = """\
apiVersion: ouro/v1
kind: Lineage
metadata: {name: cli}
spec: {generations: 1, model: {provider: echo}}
"""


def _require_replies() -> None:
    assert (REPO / "specs" / "replies" / "scribe").is_dir(), (
        "specs/replies/scribe is missing: the default fleet's replay responses "
        "(written by the kernel-broker work) must be in the tree"
    )


def test_validate_ok_prints_a_summary(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    (tmp_path / "b.yml").write_text(VALID.replace("name: cli", "name: two") + "---\n"
                                    + VALID.replace("name: cli", "name: three"))
    result = CliRunner().invoke(app, ["validate", str(tmp_path), "--state-dir", str(tmp_path)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        0, "ok: 3 lineages in 2 files: cli, two, three\n", "")


def test_validate_bad_exits_1_with_problems_on_stderr(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(VALID.replace("generations: 1", "generations: 1, generatons: 2"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"{path}:4:24: spec.generatons: unknown field; did you mean 'generations'? "
        "(allowed here: generations, model, ceilings, storage, instrument, from, executor, "
        "probes, until, suspend)\n"
        "ouro validate: 1 problem in 1 file\n"
    )


def test_the_console_entry_point_never_shows_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_bytes(b"\xff\xfe: [\n")
    (tmp_path / "also.yaml").write_text("a: b: c")
    run = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli import main; main()", "validate",
         str(tmp_path), str(tmp_path / "missing")],
        capture_output=True, text=True, cwd=REPO,
    )
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    assert run.stderr.splitlines() == [
        f"{tmp_path}/also.yaml:1:5: YAML syntax error: mapping values are not allowed here",
        f"{tmp_path}/bad.yaml:1:1: not UTF-8 text: a byte here cannot be decoded (specs are UTF-8)",
        f"{tmp_path}/missing:1:1: no such file or folder",
        "ouro validate: 3 problems in 3 files",
    ]


def test_schema_prints_the_committed_schema_json() -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    assert result.stdout == (REPO / "schema.json").read_text(encoding="utf-8")
    assert json.loads(result.stdout)["title"] == "ouro lineage spec (ouro/v1)"


@pytest.mark.parametrize("path", SHIPPED, ids=[f"{p.parent.name}/{p.name}" for p in SHIPPED])
def test_shipped_specs_point_editors_at_the_schema(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=../schema.json"
    assert (path.parent / "../schema.json").resolve() == REPO / "schema.json"


def test_shipped_specs_and_examples_are_valid() -> None:
    _require_replies()
    result = CliRunner().invoke(app, ["validate", str(REPO / "specs"), str(REPO / "examples")])
    assert result.exit_code == 0, result.stderr
    names = [spec.name for spec in load_specs([REPO / "specs", REPO / "examples"])]
    assert names[:2] == ["scribe", "quiet"]
    assert {"opus-01", "gpt-03", "local-qwen", "replay-demo", "fleet-opus"} <= set(names)


def test_the_default_fleet_is_offline_and_modest() -> None:
    _require_replies()
    scribe, quiet = load_specs([REPO / "specs" / "fleet.yaml"])
    assert (scribe.name, scribe.model().provider, scribe.spec.spec.generations) == (
        "scribe", "replay", 5)
    assert scribe.model().replay_dir == REPO / "specs" / "replies" / "scribe"
    assert (quiet.name, quiet.model().provider, quiet.spec.spec.generations) == (
        "quiet", "echo", 3)
    for spec in (scribe, quiet):
        ceilings = spec.ceilings()
        assert (ceilings.wall_seconds, ceilings.cpu_seconds, ceilings.memory_bytes) == (
            120, 60, 512 << 20)
        assert spec.model().api_key_env is None


def test_examples_cover_every_provider() -> None:
    _require_replies()
    providers = {spec.model().provider for spec in load_specs([REPO / "examples"])}
    assert providers == {"anthropic", "openai", "openai-compatible", "replay", "echo"}
    ollama = next(s for s in load_specs([REPO / "examples" / "ollama.yaml"]))
    assert (ollama.model().base_url, ollama.model().api_key_env) == (
        "http://127.0.0.1:11434/v1", None)
