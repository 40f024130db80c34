"""The rules of forks that need no sandbox: spec.from at load (errors at FILE:LINE:COL),
the fork's journal as both journal readers see it, the plan's refusals as data."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from reconciler.errors import SpecError
from reconciler.kernel.base import formats
from reconciler.kernel.base.refusals import REASONS
from reconciler.plan.forks import FORK_REASONS, fork_refusal
from reconciler.plan.remedies import REMEDIES
from reconciler.spec.load import load_specs
from reconciler.state.forks import ForkProblem, ForkSource, fork_journal
from tests.kernel_formats import original_reader

LINEAGE = """\
apiVersion: ouro/v1
kind: Lineage
metadata: {{name: {name}}}
spec:
  generations: 1
  model: {{provider: echo}}
  from: {{lineage: {parent}, generation: 2{extra}}}
{more}"""


def _write(folder: Path, name: str, parent: str, extra: str = "", more: str = "") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(LINEAGE.format(name=name, parent=parent, extra=extra, more=more))
    return path


def _problems(*paths: Path, state: Path) -> list[str]:
    with pytest.raises(SpecError) as raised:
        load_specs(list(paths), state_dir=state)
    return [str(problem) for problem in raised.value.problems]


def test_a_fork_finds_its_parent_in_the_run_else_in_the_state_dir(tmp_path: Path) -> None:
    parent = tmp_path / "scribe.yaml"
    parent.write_text("apiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: scribe}\nspec:\n"
                      "  generations: 3\n  model: {provider: echo}\n"
                      "  storage: {path: elsewhere/scribe, branch: main}\n")
    child = _write(tmp_path, "child", "scribe")
    orphan = _write(tmp_path, "orphan", "absent")
    loaded = {spec.name: spec for spec in load_specs([parent, child, orphan],
                                                     state_dir=tmp_path / "state")}
    found = loaded["child"].fork_parent
    assert found is not None and found.paths().worktree == tmp_path / "elsewhere" / "scribe"
    assert found.declared_branch == "main"
    elsewhere = loaded["orphan"].fork_parent
    assert elsewhere is not None and elsewhere.paths().worktree == tmp_path / "state" / "absent"
    assert loaded["scribe"].fork_parent is None and loaded["scribe"].fork is None


def test_what_no_plan_can_mend_is_an_error_at_its_place(tmp_path: Path) -> None:
    state = tmp_path / "state"
    selfish = _write(tmp_path, "selfish", "selfish")
    pinned = _write(tmp_path, "pinned", "scribe", ", kernel: parent",
                    "  instrument: {commit: '" + "a" * 40 + "'}\n")
    one = _write(tmp_path, "one", "two")
    two = _write(tmp_path, "two", "one")
    problems = _problems(selfish, pinned, one, two, state=state)
    assert any(p.startswith(f"{selfish}:7:19: spec.from.lineage: a lineage cannot fork "
                            "itself") for p in problems), problems
    assert any(p.startswith(f"{pinned}:7:50: spec.from.kernel: kernel: parent births")
               for p in problems), problems
    assert sum("forks in a circle" in p for p in problems) == 2, problems
    bad = _write(tmp_path, "bad", "Not_A_Name", ", kernel: sideways")
    problems = _problems(bad, state=state)
    assert any("spec.from.lineage" in p and "is not a lineage name" in p for p in problems)
    assert any("spec.from.kernel: must be 'running' or 'parent'" in p for p in problems)


def test_a_set_template_may_fork_and_its_members_say_which(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("apiVersion: ouro/v1\nkind: LineageSet\nmetadata: {name: replay}\n"
                     "spec:\n  replicas: 2\n  matrix:\n    from.generation: [1, 2]\n"
                     "  template:\n    generations: 1\n    model: {provider: echo}\n"
                     "    from: {lineage: scribe, generation: 1}\n")
    loaded = load_specs([sweep], state_dir=tmp_path / "state")
    generations = sorted((spec.fork.generation, spec.name) for spec in loaded
                         if spec.fork is not None)
    assert [g for g, _ in generations] == [1, 1, 2, 2]
    assert all(spec.fork_parent is not None for spec in loaded)


RECORD: dict[str, Any] = {"parent": "scribe", "generation": 4, "parent_root": "r" * 40,
                          "commit": "c" * 40}
H = formats.DASH
JOURNALS = {
    "empty": "",
    "ordinary": f"\n## gen 1 {H} no-change {H} 2026-01-01T00:00:00+00:00\n"
                f"\n## gen 2 {H} died {H} 2026-01-01T00:01:00+00:00\nexit 255\n~~~\nboom\n~~~\n",
    # release 1: a stderr line that reads as a heading to the original's reader
    "forged in a fence": f"\n## gen 1 {H} died {H} t\nexit 1\n~~~\n## gen 9 {H} changed\n~~~\n",
    # a heading whose \\s spans lines, and one CommonMark reads after a CR
    "across lines": f"\n##\ngen 3 {H} x\n\n## gen 1 {H} no-change {H} t\r## gen 2 {H} "
                    f"no-change {H} t\n",
    "indented": f"\n   ## gen 5 {H} no-change {H} 2026-01-01T00:00:00+00:00\n",
}


@pytest.mark.parametrize("journal", JOURNALS.values(), ids=JOURNALS.keys())
def test_the_parents_journal_is_kept_under_a_heading_neither_reader_takes(journal: str) -> None:
    seeded = fork_journal(journal.encode(), RECORD).decode()
    assert seeded.startswith("# forked from scribe at gen 4\n\nparent root " + "r" * 40)
    assert formats.parse_journal(seeded) == []
    assert original_reader.heading_numbers(seeded) == []
    assert original_reader.entry(seeded, 1)["found"] is False
    # the child's own entries are then its only ones, for both readers
    entry = formats.journal_entry(1, "no-change", "2026-02-01T00:00:00+00:00")
    grown = formats.append_entry(seeded, entry)
    assert [h.number for h in formats.parse_journal(grown)] == [1]
    assert original_reader.verify(grown, ["no-change"]) == []
    # nothing but '#' was added: the parent's text is all there, in order
    assert seeded.replace("#", "").endswith(journal.replace("#", "").lstrip("\n"))


def test_the_journals_bytes_survive_as_they_are() -> None:
    raw = b"\n## gen 1 \xe2\x80\x94 no-change \xe2\x80\x94 t\n\xff\xfe not utf-8\n"
    seeded = fork_journal(raw, RECORD)
    assert seeded.endswith(b"\n### gen 1 \xe2\x80\x94 no-change \xe2\x80\x94 t\n"
                           b"\xff\xfe not utf-8\n")


@pytest.mark.parametrize(("problem", "words"), [
    ("fork-no-generation", "apply the parent first"),
    ("fork-death", "fork from the generation before the death"),
    ("fork-unreadable", "name the parent's spec in this run"),
])
def test_each_fork_refusal_names_its_remedy(problem: Any, words: str) -> None:
    source = ForkSource("scribe", 4, problem, "why")
    reason, message = fork_refusal("child", source) or ("", "")
    assert reason == problem
    assert message.startswith("lineage child: cannot fork from gen 4 of scribe: why: ")
    assert words in message
    assert fork_refusal("child", ForkSource("scribe", 4)) is None


@pytest.mark.parametrize("problem", get_args(ForkProblem))
def test_a_fork_that_cannot_start_is_refused_by_the_plan_after_the_kernels_reasons(
        problem: str) -> None:
    """Every problem the state layer reports of a fork's parent refuses the plan under
    that reason, a reason of the plan's own (no kernel gives it) with its own remedy; a
    kernel's refusal of the same lineage comes first."""
    from reconciler.plan import plan_lineage
    from tests.plan.test_plan_table import ME, NOTHING, FakeSpec, observed

    source = ForkSource("scribe", 4, problem, "why")
    plan = plan_lineage(FakeSpec(), observed(**NOTHING), ME, fork=source)
    assert (plan.action, plan.reason) == ("refuse", problem)
    assert plan.message.startswith("lineage x: cannot fork from gen 4 of scribe: why: ")
    assert problem in FORK_REASONS and problem not in REASONS and problem not in REMEDIES
    pinned = plan_lineage(FakeSpec(instrument_pin="c" * 40), observed(**NOTHING), ME,
                          fork=source)
    assert [r.reason for r in pinned.refusals] == ["spec-pin-mismatch", problem]


def test_a_born_fork_whose_spec_names_another_generation_is_told_not_reforked() -> None:
    import dataclasses
    from types import SimpleNamespace

    from reconciler.plan import plan_lineage
    from tests.plan.test_plan_table import ME, META, FakeSpec, observed

    @dataclasses.dataclass(frozen=True)
    class ForkSpec(FakeSpec):
        fork: Any = dataclasses.field(default_factory=lambda: SimpleNamespace(
            lineage="scribe", generation=41, kernel="running"))

    record = {"parent": "scribe", "generation": 40}
    seen = observed(lineage_metadata={**META, "ouro_fork": record})
    plan = plan_lineage(ForkSpec(), seen, ME)
    assert plan.action == "extend"
    assert any("spec.from names gen 41 of scribe, but this lineage was forked from gen 40 "
               "of scribe" in note for note in plan.notes), plan.notes
    same = plan_lineage(ForkSpec(fork=SimpleNamespace(lineage="scribe", generation=40)),
                        seen, ME)
    assert not any("spec.from" in note for note in same.notes)
