"""`ouro compare` on a real set: the numbers are recomputed here from the trees (git
itself, numpy), or known by construction; never read back from `ouro export`."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from tests.apply.helpers import REPO_ROOT, ouro_argv, run_ouro

from .conftest import Grown, organism_bytes

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]


def compare(grown: Grown, *args: str) -> tuple[dict[str, Any], str]:
    result = run_ouro("compare", str(grown.spec), "--json", *args, env=grown.env)
    assert result.returncode == 0, result.stdout + result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document, result.stdout


def by_cell(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {group["group"].split("-")[2]: group for group in document["groups"]}


def test_both_cells_have_n_3_the_means_in_order_and_the_rules_stated(grown: Grown) -> None:
    document, text = compare(grown, "--at", "2", "--metric", "probe.size.bytes")
    assert (document["kind"], document["generation"], document["metric"]) == (
        "ouro-compare", 2, "probe.size.bytes")
    cells = by_cell(document)
    assert list(cells) == ["small", "large"]
    for cell, group in cells.items():
        values = [grown.probe_bytes(name, 2) for name in grown.members[cell]]
        assert (group["members"], group["alive"], group["n"]) == (3, 3, 3)
        assert group["mean"] == pytest.approx(np.mean(values))
        assert group["median"] == pytest.approx(np.median(values))
        assert (group["min"], group["max"]) == (min(values), max(values))
        low, high = group["ci"]
        assert low <= group["mean"] <= high
    assert cells["small"]["mean"] < cells["large"]["mean"]
    (pair,) = document["pairs"]
    assert pair["difference"] == pytest.approx(cells["small"]["mean"] - cells["large"]["mean"])
    assert pair["ci"][0] <= pair["difference"] <= pair["ci"][1] < 0
    # 3 against 3, wholly apart: the exact two-sided Mann-Whitney p is 2 / C(6, 3) = 0.1;
    # two replicas of a cell whose noise came out equal (a tie) make scipy's answer the
    # normal approximation's, asked of scipy here from the values git holds
    small, large = ([grown.probe_bytes(name, 2) for name in grown.members[cell]]
                    for cell in ("small", "large"))
    tied = len(set(small)) < 3 or len(set(large)) < 3
    assert pair["p_value"] == pytest.approx(
        mannwhitneyu(small, large, alternative="two-sided").pvalue if tied else 0.1)
    assert document["bootstrap"] == {"method": "BCa", "resamples": 9999, "seed": 38}
    assert "Mann-Whitney" in document["test"] and "BCa" in document["ci_method"]
    assert "left out of n" in document["survivor_rule"]
    assert compare(grown, "--at", "2", "--metric", "probe.size.bytes")[1] == text


def test_organism_size_is_known_by_construction(grown: Grown) -> None:
    document, _ = compare(grown, "--at", "2", "--metric", "organism_bytes")
    for cell, group in by_cell(document).items():
        assert (group["n"], group["mean"], group["ci"]) == (
            3, organism_bytes(cell, 2), [organism_bytes(cell, 2)] * 2)


def test_a_member_stopped_early_is_out_of_n_and_carry_last_counts_it(grown: Grown) -> None:
    document, _ = compare(grown, "--metric", "probe.size.bytes")  # --at last: 3
    assert document["generation"] == 3
    small = by_cell(document)["small"]
    kept = [grown.probe_bytes(name, 3) for name in grown.members["small"][:2]]
    assert (small["members"], small["alive"], small["n"], small["carried"]) == (3, 2, 2, 0)
    assert small["mean"] == pytest.approx(np.mean(kept))
    stopped = next(r for r in small["readings"] if r["lineage"] == grown.stopped)
    assert stopped == {"lineage": grown.stopped, "alive": False, "last_generation": 2,
                       "value": None, "read_at": None}
    carried, _ = compare(grown, "--metric", "probe.size.bytes", "--carry-last")
    small = by_cell(carried)["small"]
    last = grown.probe_bytes(grown.stopped, 2)
    assert (small["alive"], small["n"], small["carried"]) == (2, 3, 1)
    assert small["mean"] == pytest.approx(np.mean([*kept, last]))
    stopped = next(r for r in small["readings"] if r["lineage"] == grown.stopped)
    assert (stopped["alive"], stopped["value"], stopped["read_at"]) == (False, last, 2)
    assert "--carry-last" in carried["survivor_rule"]


def test_row_0_is_the_seed_for_every_probed_lineage(grown: Grown) -> None:
    names = [name for cell in grown.members.values() for name in cell]
    for name in names:
        lines = run_ouro("export", "--format", "jsonl", name, env=grown.env).stdout
        first = json.loads(lines.splitlines()[0])
        assert (first["generation"], first["status"], first["outcome"]) == (0, "seed", "seed")
        assert first["probe.size.bytes"] == len(grown.git_show(
            name, grown.commits(name)[0], "organism.el"))
        assert first["lineage_commit"] == grown.commits(name)[0]
        logged = json.loads(run_ouro("log", "--json", name, env=grown.env).stdout)
        assert logged["lineages"][0]["rows"][0]["generation"] == 0
    document, _ = compare(grown, "--at", "0", "--metric", "probe.size.bytes")
    for group in document["groups"]:
        assert (group["n"], group["mean"]) == (3, organism_bytes("small", 0))


@pytest.mark.parametrize("path", ["organism.el", "blob.bin"])
def test_cat_is_git_show_byte_for_byte(grown: Grown, path: str) -> None:
    name = grown.members["large"][1]
    commit = grown.commits(name)[3]
    expected = grown.git_show(name, commit, path)
    if path == "blob.bin":
        assert b"\0" in expected and b"\xff" in expected  # binary indeed
    raw = subprocess.run(ouro_argv("cat", name, "3", path), cwd=REPO_ROOT, env=grown.env,
                         capture_output=True, check=True).stdout
    assert raw == expected
    out = grown.state.parent / f"cat-{path}"
    subprocess.run(ouro_argv("cat", name, "3", path, "-o", str(out)), cwd=REPO_ROOT,
                   env=grown.env, capture_output=True, check=True)
    assert out.read_bytes() == expected


def test_cat_names_what_is_missing(grown: Grown) -> None:
    name = grown.members["large"][0]
    result = run_ouro("cat", name, "9", env=grown.env)
    assert result.returncode == 1 and "has no generation 9" in result.stderr
    result = run_ouro("cat", name, "1", "nothing.here", env=grown.env)
    assert result.returncode == 1 and "no file 'nothing.here' in its tree" in result.stderr
    assert "does not read" not in result.stderr


def test_best_names_the_two_best_pairs(grown: Grown) -> None:
    every = sorted(((grown.probe_bytes(name, generation), name, generation)
                    for cell in grown.members.values() for name in cell
                    for generation in grown.commits(name)), reverse=True)
    result = run_ouro("best", str(grown.spec), "--by", "probe.size.bytes", "-n", "2",
                      "--json", env=grown.env)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)["best"]
    assert [(item["value"], item["lineage"], item["generation"]) for item in found] == [
        (float(value), name, generation) for value, name, generation in every[:2]]
    assert found[0]["command"].startswith(f"ouro cat {found[0]['lineage']} 3 --specs ")


@pytest.mark.parametrize(("args", "message", "code"), [
    (("--metric", "nope"), "is no column of the per-generation table", 1),
    (("--metric", "probe.size.nope"), "no generation of these lineages has that", 1),
    (("--at", "soon"), "is neither a generation number nor 'last'", 2),
], ids=["column", "probe-metric", "at"])
def test_a_bad_question_is_a_clear_error(grown: Grown, args: tuple[str, ...], message: str,
                                         code: int) -> None:
    result = run_ouro("compare", str(grown.spec), *args, env=grown.env)
    assert result.returncode == code and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
