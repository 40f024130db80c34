"""`ouro reproduce` on real lineages (real bubblewrap, cgroups, Emacs, git): the default
fleet's scribe comes out as recorded and is left byte for byte as it was; an organism
that writes the time into its tree diverges at its first life, naming the path; deaths,
no-change generations and a person's edits between generations are reproduced; the
original instrument's lineage is refused with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.engine.reproduce.scratch import REPLY_NAME_WIDTH
from reconciler.kernel.base.config import LineagePaths
from reconciler.kernel.transaction.lineage import ORGANISM
from reconciler.state import reproduction_record
from tests.apply.helpers import run_ouro
from tests.forks.helpers import grow_family
from tests.reproduce.helpers import (
    CLOCK_BODY,
    MOODS_BODY,
    fingerprint,
    grow,
    reproduce_json,
    scribe,
)

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]
SEED = ORGANISM.read_text()


def test_scribe_reproduces_five_of_five_untouched_and_free(
        specs: Path, env: dict[str, str], tmp_path: Path) -> None:
    scribe(specs, env)
    state = tmp_path / "state"
    before = fingerprint(state, "scribe")
    done = run_ouro("reproduce", "scribe", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "reproduced 5 of 5 generations"
    assert "spent $0" in done.stdout
    code, verdict = reproduce_json(env, "scribe")
    assert code == 0
    assert (verdict["kind"], verdict["status"], verdict["reproduced"],
            verdict["generations"]) == ("ouro-reproduce", "reproduced", 5, 5)
    assert (verdict["spend_usd"], verdict["recorded_spend_usd"], verdict["replies"]) == (
        "0", "0", 4)
    assert fingerprint(state, "scribe") == before  # refs, object counts, every byte
    paths = LineagePaths(state / "scribe", state / "scribe.git", state / "scribe.observations",
                         "lineage-scribe", "observations/lineage-scribe")
    kept = reproduction_record.load(state / reproduction_record.RECORD_DIR, "scribe", paths)
    assert kept is not None and kept.current and kept.verdict["status"] == "reproduced"


def test_reproduce_to_stops_at_the_generation_asked(specs: Path, env: dict[str, str]) -> None:
    scribe(specs, env)
    code, verdict = reproduce_json(env, "scribe", "--to", "3")
    assert (code, verdict["reproduced"], verdict["generations"], verdict["replies"]) == (
        0, 3, 3, 3)
    done = run_ouro("reproduce", "scribe", "--to", "9", env=env)
    assert done.returncode == 1 and "has 5 generation(s), not 9" in done.stderr + done.stdout


def test_an_organism_that_writes_the_time_diverges_at_its_first_life(
        specs: Path, env: dict[str, str]) -> None:
    grow(specs, env, "clock", 3, [CLOCK_BODY])
    done = run_ouro("reproduce", "clock", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("clock: diverged at gen 2 (tree)"), done.stdout
    assert "modified: now.txt" in done.stdout
    code, verdict = reproduce_json(env, "clock")
    divergence = verdict["divergence"]
    assert (code, verdict["status"], verdict["reproduced"]) == (1, "diverged", 1)
    assert (divergence["generation"], divergence["what"]) == (2, ["tree"])
    assert [p["path"] for p in divergence["paths"]] == ["now.txt"]
    assert divergence["paths"][0]["diff"][0] == "--- recorded/now.txt"


def test_an_organism_that_asks_with_the_time_diverges_in_its_call(
        specs: Path, env: dict[str, str]) -> None:
    # the seed, but its prompt begins with the time: same tree, same reply, another question
    asking = SEED.replace("\n(organism-live)\n", '\n(setq organism-prompt (concat '
                          '(format-time-string "%s.%N") "\\n" organism-prompt))\n'
                          "(organism-live)\n")
    assert asking != SEED
    grow(specs, env, "asker", 2, [asking, SEED])
    code, verdict = reproduce_json(env, "asker")
    divergence = verdict["divergence"]
    assert (code, verdict["status"], divergence["generation"], divergence["what"]) == (
        1, "diverged", 2, ["calls"]), verdict
    assert divergence["calls"][0].startswith("call 1 asked something else: "), divergence


def test_deaths_and_no_change_generations_reproduce(specs: Path, env: dict[str, str]) -> None:
    grow(specs, env, "moods", 4, [MOODS_BODY])
    log = run_ouro("log", "moods", env=env).stdout
    assert "no-change" in log and "died" in log, log
    code, verdict = reproduce_json(env, "moods")
    assert (code, verdict["status"], verdict["reproduced"]) == (0, "reproduced", 4), verdict


def test_hand_edits_between_generations_are_part_of_the_record(tmp_path: Path) -> None:
    family = grow_family(tmp_path / "family")  # echo replies, two external edits, a death
    code, verdict = reproduce_json(family.env, "scribe")
    assert (code, verdict["status"], verdict["reproduced"]) == (0, "reproduced", 3), verdict


def test_a_lineage_of_the_original_instrument_is_refused(
        original_lineage: Path, env: dict[str, str]) -> None:
    done = run_ouro("reproduce", "fixture", "--state-dir", str(original_lineage.parent),
                    env=env)
    assert done.returncode == 1
    assert "cannot be reproduced (no-kernel-entry)" in done.stdout
    assert "original instrument" in done.stdout
    code, verdict = reproduce_json(env, "fixture", "--state-dir", str(original_lineage.parent))
    assert (code, verdict["status"], verdict["reason"]) == (1, "refused", "no-kernel-entry")


def test_reply_files_sort_in_reply_order() -> None:
    assert f"{9:0{REPLY_NAME_WIDTH}d}" < f"{10:0{REPLY_NAME_WIDTH}d}"
