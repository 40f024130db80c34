"""--select by name and kubectl label selector; labels in plan and status; status says
where each lineage lives and, without specs, lists the state dir's lineages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.spec.select import Selector, SelectorError, parse, select

ROOT = Path(__file__).resolve().parents[2]
MAIN = "import sys; from reconciler.cli import main; sys.argv[0] = 'ouro'; main()"
SPEC = """\
apiVersion: ouro/v1
kind: Lineage
metadata:
  name: {name}
  labels: {labels}
spec: {{generations: 1, model: {{provider: echo}}}}
"""
FLEET = {"evo-gpt": "{team: evo, model: gpt}", "evo-claude": "{team: evo, model: claude}",
         "ops-gpt": "{team: ops, model: gpt}", "bare": "{}"}


def ouro(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=ROOT,
                          env=env or dict(os.environ), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir()
    for name, labels in FLEET.items():
        (folder / f"{name}.yaml").write_text(SPEC.format(name=name, labels=labels))
    return folder


class _Item:
    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.name, self.labels = name, labels


ITEMS = [_Item("evo-gpt", {"team": "evo", "model": "gpt"}),
         _Item("evo-claude", {"team": "evo", "model": "claude"}),
         _Item("ops-gpt", {"team": "ops", "model": "gpt"}), _Item("bare", {})]


@pytest.mark.parametrize(("values", "chosen"), [
    ([], ["evo-gpt", "evo-claude", "ops-gpt", "bare"]),
    (["bare"], ["bare"]),
    (["team=evo"], ["evo-gpt", "evo-claude"]),
    (["team==evo"], ["evo-gpt", "evo-claude"]),
    (["team=evo,model!=gpt"], ["evo-claude"]),
    (["model!=gpt"], ["evo-claude", "bare"]),  # != matches a lineage without the label
    (["team in (evo, ops)"], ["evo-gpt", "evo-claude", "ops-gpt"]),
    (["team notin (evo)"], ["ops-gpt", "bare"]),
    (["team,model=gpt"], ["evo-gpt", "ops-gpt"]),
    (["!team"], ["bare"]),
    (["bare", "team=ops"], ["ops-gpt", "bare"]),  # any value may match; spec order kept
], ids=lambda v: repr(v))
def test_selectors_choose_like_kubectl(values: list[str], chosen: list[str]) -> None:
    assert [i.name for i in select(ITEMS, [parse(v) for v in values])] == chosen


@pytest.mark.parametrize("text", ["", "team=evo=x", "team in evo", "a b=c", "team=(x)",
                                  "-bad=1", "team notin (a", "bad key"])
def test_bad_selectors_are_refused_with_the_syntax(text: str) -> None:
    with pytest.raises(SelectorError):
        parse(text)


def test_a_selector_that_selects_nothing_is_an_error() -> None:
    with pytest.raises(SelectorError, match=r"selects no lineage.*labels: model=claude"):
        select(ITEMS, [parse("team=nobody")])
    with pytest.raises(SelectorError, match="evo-gtp"):
        select(ITEMS, [Selector("evo-gtp", name="evo-gtp")])


def test_plan_select_by_label_and_labels_shown(specs: Path) -> None:
    done = ouro("plan", str(specs), "-l", "team=evo,model!=gpt")
    assert done.returncode == 2, done.stderr
    assert "evo-claude" in done.stdout and "evo-gpt" not in done.stdout
    assert "labels: model=claude, team=evo" in done.stdout
    document = json.loads(ouro("plan", "--json", str(specs), "--select", "bare",
                               "--select", "team=ops").stdout)
    assert [(d["name"], d["labels"]) for d in document["lineages"]] == [  # spec order
        ("bare", {}), ("ops-gpt", {"model": "gpt", "team": "ops"})]


def test_plan_bad_selector_is_a_usage_error_and_an_empty_one_an_error(specs: Path) -> None:
    bad = ouro("plan", str(specs), "-l", "team in evo")
    assert bad.returncode == 2 and "Usage: ouro plan" in bad.stderr, bad.stderr
    empty = ouro("plan", str(specs), "-l", "team=nobody")
    assert empty.returncode == 1
    assert "selects no lineage" in empty.stderr and "Traceback" not in empty.stderr


def test_status_shows_labels_and_where_each_lineage_lives(specs: Path, tmp_path: Path) -> None:
    done = ouro("status", str(specs), "-l", "team=ops")
    assert done.returncode == 0, done.stderr
    state = Path(os.environ["OURO_STATE_DIR"])
    assert done.stdout.splitlines()[:5] == [
        "ops-gpt: 0 generations (0 changed, 0 no-change, 0 died)",
        "  labels: model=gpt, team=ops",
        f"  worktree: {state / 'ops-gpt'}", f"  git dir: {state / 'ops-gpt.git'}",
        f"  observations: {state / 'ops-gpt.observations'}"]
    document = json.loads(ouro("status", "--json", str(specs), "--select", "bare").stdout)
    (line,) = document["lineages"]
    assert line["places"] == {"worktree": str(state / "bare"), "git_dir": str(state / "bare.git"),
                              "observations": str(state / "bare.observations")}
    assert line["labels"] == {} and line["running"] is None


def test_status_without_specs_lists_the_state_dirs_lineages(tmp_path: Path) -> None:
    from reconciler.kernel.base.config import Identity
    from reconciler.kernel.base.identity import fingerprint
    from reconciler.kernel.transaction import lineage
    from reconciler.spec.load import default_places

    state = tmp_path / "elsewhere"
    identity = Identity("https://example.invalid/ouro.git", "main",
                        os.environ["OURO_INSTRUMENT_COMMIT"], fingerprint())
    for name in ("zeta", "alpha"):
        lineage.init_lineage(default_places(state / name, name), identity)
    (state / "not-a-lineage").mkdir()
    done = ouro("status", "--json", "--state-dir", str(state))
    assert done.returncode == 0, done.stderr
    names = [line["name"] for line in json.loads(done.stdout)["lineages"]]
    assert names == ["alpha", "zeta"]
    text = ouro("status", "--state-dir", str(state)).stdout
    assert f"  git dir: {state / 'zeta.git'}" in text
    empty = ouro("status", "--state-dir", str(tmp_path / "nothing"))
    assert empty.returncode == 0 and "no lineages" in empty.stderr
