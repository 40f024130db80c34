"""`ouro show` and `ouro log --json` of real lineages: the kernel that ran each generation
beside the one its lineage is pinned to, stop reasons (a reply cut off at max_tokens), a
final provider failure, and a foreign write recorded under another kernel
(tests.history.fleet: ``cut`` and ``hostile``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.history.fleet import (
    FORGED_FINGERPRINT,
    FORGED_KERNEL,
    FORGED_MESSAGE,
    HOSTILE_DETAIL,
    HOSTILE_STOP,
    Fleet,
)
from tests.history.test_cli import ouro

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]


def _metadata(fleet: Fleet, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        (fleet.state / f"{name}.observations" / "metadata.json").read_text())
    return found


def test_show_names_the_kernel_and_a_truncated_call(grown_fleet: Fleet) -> None:
    born = _metadata(grown_fleet, "cut")
    text = ouro(grown_fleet, "show", "cut", "1")
    assert (f"kernel {born['instrument_commit'][:12]} fingerprint "
            f"{born['instrument_fingerprint']}") in text
    assert "source running" in text and "control plane: ouro 0.1.0 at " in text
    assert "emacs GNU Emacs" in text and "bubblewrap bubblewrap" in text
    assert "DIFFERS" not in text
    assert "http 200, stop max_tokens, TRUNCATED (cut off at the output-token limit)" in text
    document = json.loads(ouro(grown_fleet, "show", "cut", "1", "--json"))
    kernel = document["kernel"]
    assert kernel["ran_with"]["status"] == "recorded" and kernel["differs"] is None
    assert kernel["ran_with"]["fingerprint"] == born["instrument_fingerprint"]
    assert kernel["born_under"]["commit"] == born["instrument_commit"]
    assert kernel["ran_with"]["versions"]["emacs"].startswith("GNU Emacs")
    [stop] = document["model_stops"]
    assert stop["stop_reason"] == "max_tokens" and stop["truncated"] is True
    assert document["provider_failure"] is None


def test_show_a_final_provider_failure(grown_fleet: Fleet) -> None:
    text = ouro(grown_fleet, "show", "cut", "3")
    assert ("model failure: model unavailable (401) (auth, HTTP 401; final; stops the "
            "lineage; every call failed)") in text
    assert "http 502, stop —, error model_unavailable" in text
    assert HOSTILE_DETAIL in text  # the provider's own words, verbatim (inert in a terminal)
    document = json.loads(ouro(grown_fleet, "show", "cut", "3", "--json"))
    failure = document["provider_failure"]
    assert failure["code"] == "auth" and failure["stops_lineage"] is True
    assert HOSTILE_STOP in ouro(grown_fleet, "show", "cut", "2")


def test_show_flags_a_generation_under_another_kernel(grown_fleet: Fleet) -> None:
    text = ouro(grown_fleet, "show", "hostile", "1")
    assert f"fingerprint {FORGED_FINGERPRINT}" in text and FORGED_KERNEL[:12] in text
    assert "DIFFERS: this generation's kernel fingerprint" in text
    assert FORGED_MESSAGE in text
    assert "DIFFERS" not in ouro(grown_fleet, "show", "hostile", "2")
    document = json.loads(ouro(grown_fleet, "show", "hostile", "1", "--json"))
    assert document["kernel"]["differs"] == "fingerprint"


def test_log_rows_carry_kernel_and_stops(grown_fleet: Fleet) -> None:
    born = _metadata(grown_fleet, "cut")
    [cut] = json.loads(ouro(grown_fleet, "log", "cut", "--json"))["lineages"]
    seed, *rows = cut["rows"]  # row 0, the seed: no life, no kernel recorded
    assert (seed["generation"], seed["ran_with"], seed["kernel_fingerprint"]) == (0, None, None)
    assert [row["truncated_calls"] for row in rows] == [1, 0, 0]
    assert [row["stops_lineage"] for row in rows] == [False, False, True]
    assert {row["kernel_fingerprint"] for row in rows} == {born["instrument_fingerprint"]}
    assert {row["ran_with"] for row in rows} == {"recorded"}
    [hostile] = json.loads(ouro(grown_fleet, "log", "hostile", "--json"))["lineages"]
    assert hostile["rows"][1]["kernel_fingerprint"] == FORGED_FINGERPRINT
