"""One spend rule: `ouro status` and `ouro verify` count the original instrument's records alike.

The records are the original instrument's own (the shared fixture), then the same
lineage with amounts written the ways a record can carry them: accounted, only
reserved (usage unknown: the worst case stays), both, neither, damaged.
"""

from __future__ import annotations

import json
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base import formats
from reconciler.state.audit import accounted_spend, audit_lineage
from reconciler.state.observe import observe
from reconciler.state.status import read_status
from tests.plan.original import peer
from tests.verify.test_audit import fixture_paths


def _records(observations: Path) -> dict[int, dict[str, Any]]:
    folder = observations / formats.GENERATIONS_DIR
    return {int(p.stem): json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def _rewrite_calls(observations: Path, amounts: dict[int, list[dict[str, Any]]]) -> None:
    """Give generation N's first calls these amount fields, committed like the kernel would."""
    for number, fields in amounts.items():
        path = observations / formats.observation_path(number)
        record = json.loads(path.read_text())
        calls = record["model_calls"] or [{"schema": "ouroboros-model-call/v1"}]
        while len(calls) < len(fields):
            calls.append(dict(calls[0]))
        for call, extra in zip(calls, fields, strict=False):
            call.update(extra)
        record["model_calls"] = calls
        path.write_text(json.dumps(record, indent=2) + "\n")
    subprocess.run(["git", "-C", str(observations), "commit", "-qam", "test: amounts"],
                   check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                        "PATH": "/usr/bin:/bin"})


def _both(worktree: Path, *, allow_problems: bool = False
          ) -> tuple[Decimal, Decimal, set[tuple[str, int | None]]]:
    """(status's spend, the audit's spend over the same records, the audit's findings)."""
    paths = fixture_paths(worktree)
    status = read_status(paths, observe(paths))
    assert allow_problems or status.problems == (), status.problems
    audited = sum((accounted_spend(r) for r in _records(paths.observations).values()),
                  Decimal(0))
    findings = {(f.code, f.generation) for f in audit_lineage(paths, "fixture").findings}
    return Decimal(status.accounted_usd), audited, findings


def test_the_original_records_cost_the_same_to_status_and_verify(original_lineage: Path) -> None:
    records = _records(fixture_paths(original_lineage).observations)
    assert len(records) == 5 and any(r["model_calls"] for r in records.values())
    status, audited, findings = _both(original_lineage)
    assert status == audited == Decimal(0)  # the original records no amounts at all
    assert findings == set()


@pytest.mark.parametrize(
    ("amounts", "total", "overspent"),
    [
        ({1: [{"accounted_usd": "0.25"}]}, Decimal("0.25"), set()),
        # usage unknown: the reservation is the spend (status once ignored it)
        ({1: [{"accounted_usd": None, "reserved_usd": "0.40"}],
          2: [{"accounted_usd": "0.25", "reserved_usd": "0.50"}]}, Decimal("0.65"), set()),
        ({3: [{"reserved_usd": "0.60"}, {"reserved_usd": "0.60"}]}, Decimal("1.20"), {3}),
        ({2: [{"accounted_usd": 1, "reserved_usd": None}]}, Decimal("1"), set()),
        ({5: [{"accounted_usd": None, "reserved_usd": None}]}, Decimal("0"), set()),
    ],
)
def test_status_and_verify_apply_one_spend_rule(
    original_lineage: Path, amounts: dict[int, list[dict[str, Any]]], total: Decimal,
    overspent: set[int],
) -> None:
    _rewrite_calls(fixture_paths(original_lineage).observations, amounts)
    status, audited, findings = _both(original_lineage)
    assert status == audited == total
    assert {n for code, n in findings if code == "overspend"} == overspent


def test_a_damaged_amount_costs_its_reservation_and_is_a_finding(original_lineage: Path) -> None:
    _rewrite_calls(fixture_paths(original_lineage).observations,
                   {1: [{"accounted_usd": "lots", "reserved_usd": "0.10"}]})
    status, audited, findings = _both(original_lineage, allow_problems=True)
    assert status == audited == Decimal("0.10")
    assert {n for _, n in findings} == {1}  # the record is outside its schema


def test_the_rule_itself() -> None:
    spend = formats.calls_spend
    assert spend([{"accounted_usd": "0.5", "reserved_usd": "2"}]) == Decimal("0.5")
    assert spend([{"accounted_usd": None, "reserved_usd": "2"}]) == Decimal(2)
    assert spend([{"accounted_usd": 0.5, "reserved_usd": "2"}]) == Decimal(2)  # never a float
    assert spend([{"accounted_usd": True}, {"accounted_usd": "-1"}, {"accounted_usd": "NaN"}]) == 0
    assert spend([{}, "junk", None]) == 0 and spend(None) == 0 and spend("x") == 0
    assert spend([{"accounted_usd": "0.1"}] * 3) == Decimal("0.3")



def test_an_absurd_usage_recorded_before_release_2_is_not_spend_for_ever(tmp_path: Path) -> None:
    """A broker before physics release 2 accounted a usage of 10^4000 tokens as reported,
    and verify found that lineage overspent for ever. The call is flagged, so it costs its
    reservation (the most it could cost): status and verify agree and find nothing."""
    reported = format(Decimal(10 ** 4000) * Decimal(3) / Decimal(10**6), "f")
    absurd = {"schema": "ouroboros-model-call/v1", "http_status": 200,
              "usage": {"input_tokens": 10 ** 4000, "output_tokens": 5},
              "usage_exceeds_request": True, "reserved_usd": "0.40", "accounted_usd": reported}
    builder = peer(tmp_path)
    builder.gen("changed", calls=[absurd], usage_exceeds_request=True)
    builder.gen("no-change")
    status = read_status(builder.paths, observe(builder.paths))
    audit = audit_lineage(builder.paths, "peer")
    assert (audit.status, audit.findings) == ("consistent", ())
    assert Decimal(status.accounted_usd) == Decimal("0.90")  # peer's two calls of 0.25, and 0.40
    # unflagged, the same amount is spend: the flag is what clamps it
    assert formats.calls_spend([dict(absurd, usage_exceeds_request=False)]) == Decimal(reported)
