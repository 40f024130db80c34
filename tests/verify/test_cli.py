"""`ouro verify PATH...`: specs in, verdicts out, exit 0 consistent / 1 otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.engine.verify import Finding, LineageReport, VerifyReport
from reconciler.report.verify import verify_text as render
from tests.verify.test_audit import overspend, sound

SPEC = """\
apiVersion: ouro/v1
kind: Lineage
metadata:
  name: {name}
spec:
  generations: 4
  model:
    provider: openai
    name: gpt-5.6
  storage:
    path: {path}
"""


def spec(folder: Path, name: str, path: Path) -> Path:
    file = folder / f"{name}.yaml"
    file.write_text(SPEC.format(name=name, path=path))
    return file


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["verify", *args])
    return result.exit_code, result.stdout


def test_a_consistent_fleet_exits_0(tmp_path: Path) -> None:
    lineages = tmp_path / "lineages"
    sound(lineages, "alpha")
    sound(lineages, "beta")
    specs = tmp_path / "specs"
    specs.mkdir()
    spec(specs, "alpha", lineages / "alpha")
    spec(specs, "beta", lineages / "beta")
    code, out = invoke(str(specs))
    assert code == 0, out
    assert "alpha: consistent (4 generations, 4 observations)" in out
    assert "beta: consistent" in out
    assert out.rstrip().endswith("ouro verify: consistent")


def test_findings_exit_1_and_are_listed(tmp_path: Path) -> None:
    lineage = sound(tmp_path / "lineages", "alpha")
    overspend(lineage)
    code, out = invoke(str(spec(tmp_path, "alpha", tmp_path / "lineages" / "alpha")))
    assert code == 1
    assert "alpha: 1 finding (5 generations, 5 observations)" in out
    assert "gen 5: overspend:" in out


def test_unknown_exits_1_and_accuses_nobody(tmp_path: Path) -> None:
    code, out = invoke(str(spec(tmp_path, "ghost", tmp_path / "nowhere")))
    assert code == 1
    assert "ghost: unknown" in out and "not an accusation" in out
    assert str(tmp_path) not in out


def test_json_output_is_the_sanitised_report(tmp_path: Path) -> None:
    lineage = sound(tmp_path / "lineages", "alpha")
    overspend(lineage)
    code, out = invoke(str(spec(tmp_path, "alpha", tmp_path / "lineages" / "alpha")), "--json")
    assert code == 1
    report = json.loads(out)
    assert report["status"] == "findings" and report["outcome"] == "completed"
    assert report["lineages"][0]["findings"] == [
        {"code": "overspend", "lineage": "alpha", "generation": 5}
    ]


def test_the_original_fixture_through_the_cli(tmp_path: Path, original_lineage: Path) -> None:
    code, out = invoke(str(spec(tmp_path, "fixture", original_lineage)))
    assert code == 0, out
    assert "fixture: consistent (5 generations, 5 observations)" in out


def test_an_invalid_spec_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: BAD NAME}\n")
    code, _ = invoke(str(bad))
    assert code == 1


@pytest.mark.parametrize(
    ("outcome", "words"),
    [
        ("stopped", "was stopped"),
        ("timeout", "timed out"),
        ("refused", "was refused"),
        ("failed", "child failed"),
        ("completed", "could not be read"),
    ],
)
def test_render_says_why_a_lineage_is_unknown(outcome: str, words: str) -> None:
    report = VerifyReport("unknown", outcome, (LineageReport("a", "unknown"),), 1)  # type: ignore[arg-type]
    assert words in render(report)


def test_render_shows_hidden_findings_as_a_count() -> None:
    lineage = LineageReport(
        "a",
        "findings",
        findings_total=3,
        findings=(Finding("overspend", "a", 2), Finding("root-subject", "a", None)),
    )
    text = render(VerifyReport("findings", "completed", (lineage,), 1))
    assert "  gen 2: overspend:" in text and "  lineage: root-subject:" in text
    assert "... and 1 more" in text


def test_the_public_api_is_chosen() -> None:
    from reconciler.engine import verify
    from reconciler.state import audit

    assert set(verify.__all__) == {
        "DEFAULT_TIMEOUT",
        "AuditHandle",
        "AuditItem",
        "Child",
        "Finding",
        "LineageReport",
        "SpawnFn",
        "VerifyReport",
        "child_argv",
        "child_env",
        "report_cap",
        "sanitize_report",
        "spawn_child",
        "start_background_audit",
        "verify",
    }
    assert set(audit.__all__) == {
        "CODES",
        "IDENTIFIER",
        "Finding",
        "HistoryUnreadable",
        "LineageAudit",
        "Resume",
        "accounted_spend",
        "audit_lineage",
        "exception_class_name",
        "observation_valid",
        "restored_organism",
    }
    for module in (audit, verify):
        assert all(hasattr(module, name) for name in module.__all__)
