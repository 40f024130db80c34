"""LineageSet: expansion into members, stable names, labels, errors at FILE:LINE:COL."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.errors import SpecError
from reconciler.spec import select
from reconciler.spec.load import load_specs

REPO = Path(__file__).resolve().parents[2]

SET = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {{name: sweep, labels: {{team: evo}}}}
spec:
  replicas: {replicas}
  matrix:
    model:
{values}
  template:
    generations: 2
    ceilings: {{wall: 1m}}
"""
ECHO = "      - {provider: echo}"
ECHO_NAMED = "      - {provider: echo, name: other}"
REPLAY = "      - {provider: replay, replay: replies}"


def _write(folder: Path, text: str, name: str = "set.yaml") -> Path:
    (folder / "replies").mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def _names(folder: Path, values: list[str], replicas: int = 2) -> list[str]:
    path = _write(folder, SET.format(replicas=replicas, values="\n".join(values)))
    return [spec.name for spec in load_specs([path], state_dir=folder / "state")]


def test_a_set_expands_to_replicas_times_cells_with_labels(tmp_path: Path) -> None:
    path = _write(tmp_path, SET.format(replicas=3, values=f"{ECHO}\n{REPLAY}"))
    loaded = load_specs([path], state_dir=tmp_path / "state")
    assert len(loaded) == 6
    assert len({spec.name for spec in loaded}) == 6
    first = loaded[0]
    assert first.name.startswith("sweep-echo-") and first.name.endswith("-0")
    assert first.set_name == "sweep"
    cell = first.name.removeprefix("sweep-").removesuffix("-0")
    assert first.labels == {"team": "evo", "ouro/set": "sweep", "ouro/replica": "0",
                            "ouro/cell": cell, "ouro/model": "echo"}
    assert [s.labels["ouro/replica"] for s in loaded[:3]] == ["0", "1", "2"]
    assert loaded[3].model().provider == "replay"
    assert loaded[3].model().replay_dir == tmp_path / "replies"
    assert first.ceilings().wall_seconds == 60
    # each member lives at its own default place, like a plain lineage
    assert {s.paths().worktree for s in loaded} == {tmp_path / "state" / s.name for s in loaded}
    assert first.paths().branch == f"lineage-{first.name}"


def test_each_members_digest_is_of_its_own_lineage_document(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A member's sha256 is of the canonical form of the Lineage document it is (the
    loader makes its replicas' shared section once: the digest must not show it), as a
    plain spec's is (docs/spec.md); replicas of one cell differ, and so do cells."""
    import hashlib

    from reconciler.spec import sets
    from reconciler.spec.models import LineageSpec

    text = SET.format(replicas=3, values=f"{ECHO}\n{ECHO_NAMED}\n{REPLAY}")
    loaded = load_specs([_write(tmp_path, text)], state_dir=tmp_path / "state")
    written = YAML(typ="safe").load(text)
    monkeypatch.chdir(tmp_path)  # (the replay folder, relative, is checked from here)
    matrix = written["spec"]["matrix"]
    expected = []
    for cell in sets.cells("sweep", matrix):
        for index in range(3):
            member = sets.member_document("ouro/v1", {"team": "evo"}, "sweep",
                                          written["spec"]["template"], cell, index)
            document = LineageSpec.model_validate(member)
            canonical = json.dumps(document.model_dump(mode="json", by_alias=True),
                                   sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            expected.append((document.name, hashlib.sha256(canonical.encode()).hexdigest()))
    assert [(spec.name, spec.sha256) for spec in loaded] == expected
    assert len({spec.sha256 for spec in loaded}) == 9
    # the resolved model a cell's replicas share is theirs: the replay folder absolute
    assert {spec.model().replay_dir for spec in loaded[6:]} == {tmp_path / "replies"}


def test_names_are_stable_when_cells_are_added_or_reordered(tmp_path: Path) -> None:
    before = _names(tmp_path, [ECHO, REPLAY])
    after = _names(tmp_path, [ECHO_NAMED, REPLAY, ECHO])
    assert set(before) < set(after)
    assert len(after) == 6
    reordered = _names(tmp_path, [REPLAY, ECHO])
    assert set(reordered) == set(before)


def test_raising_replicas_only_adds_names(tmp_path: Path) -> None:
    two = _names(tmp_path, [ECHO], replicas=2)
    twelve = _names(tmp_path, [ECHO], replicas=12)
    assert twelve[:2] == two
    assert twelve[-1] == two[0].removesuffix("-0") + "-11"


def test_a_set_without_a_matrix_is_named_set_i(tmp_path: Path) -> None:
    path = _write(tmp_path, "apiVersion: ouro/v1\nkind: LineageSet\nmetadata: {name: plain}\n"
                  "spec: {replicas: 3, template: {generations: 1, model: {provider: echo}}}\n")
    loaded = load_specs([path], state_dir=tmp_path)
    assert [s.name for s in loaded] == ["plain-0", "plain-1", "plain-2"]
    assert loaded[0].labels == {"ouro/set": "plain", "ouro/replica": "0"}


def test_a_matrix_of_two_keys_makes_every_combination(tmp_path: Path) -> None:
    path = _write(tmp_path, "apiVersion: ouro/v1\nkind: LineageSet\nmetadata: {name: grid}\n"
                  "spec:\n  replicas: 1\n  matrix:\n    ceilings.wall: [1m, 2m, 3m]\n"
                  "    generations: [1, 5]\n  template: {model: {provider: echo}}\n")
    loaded = load_specs([path], state_dir=tmp_path)
    assert sorted((s.ceilings().wall_seconds, s.spec.spec.generations) for s in loaded) == [
        (60, 1), (60, 5), (120, 1), (120, 5), (180, 1), (180, 5)]
    assert loaded[0].labels["ouro/ceilings.wall"] == "1m"


def test_selection_by_set_label(tmp_path: Path) -> None:
    path = _write(tmp_path, SET.format(replicas=2, values=f"{ECHO}\n{REPLAY}"))
    (tmp_path / "one.yaml").write_text("apiVersion: ouro/v1\nkind: Lineage\n"
                                       "metadata: {name: alone}\n"
                                       "spec: {generations: 1, model: {provider: echo}}\n")
    loaded = load_specs([path, tmp_path / "one.yaml"], state_dir=tmp_path / "state")
    chosen = select.select(loaded, [select.parse("ouro/set=sweep")])
    assert [s.name for s in chosen] == [s.name for s in loaded if s.name != "alone"]
    echo = select.select(loaded, [select.parse("ouro/set=sweep,ouro/model=echo")])
    assert len(echo) == 2 and all(s.model().provider == "echo" for s in echo)


def _problems(path: Path, state: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_specs([path], state_dir=state)
    return [str(p) for p in caught.value.problems]


def test_a_bad_matrix_value_is_named_at_its_place_with_its_member(tmp_path: Path) -> None:
    values = f"{ECHO}\n      - {{provider: nope}}"
    path = _write(tmp_path, SET.format(replicas=2, values=values))
    problems = _problems(path, tmp_path)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}:9:20: spec.matrix.model[1].provider: member sweep-nope-")
    assert "-0: must be 'anthropic'" in problems[0]


def test_a_template_error_is_said_once_at_the_template(tmp_path: Path) -> None:
    text = SET.format(replicas=2, values=f"{ECHO}\n{REPLAY}").replace(
        "generations: 2", "generations: 2\n    bogus: 1")
    path = _write(tmp_path, text)
    problems = _problems(path, tmp_path)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}:12:5: spec.template.bogus: member sweep-")
    assert "unknown field" in problems[0]


def test_set_level_mistakes(tmp_path: Path) -> None:
    long = "s" * 55
    path = _write(tmp_path, SET.format(replicas=0, values=f"{ECHO}\n{ECHO}").replace(
        "name: sweep", f"name: {long}").replace("ceilings: {wall: 1m}",
                                                 "storage: {path: /tmp/x}"))
    problems = _problems(path, tmp_path)
    assert any(p.startswith(f"{path}:5:13: spec.replicas: must be at least 1") for p in problems)
    path = _write(tmp_path, SET.format(replicas=1, values=f"{ECHO}\n{ECHO}").replace(
        "name: sweep", f"name: {long}").replace("ceilings: {wall: 1m}",
                                                 "storage: {path: /tmp/x}"))
    problems = _problems(path, tmp_path)
    assert any(p.startswith(f"{path}:3:18: metadata.name: '{long}' is too long for a set")
               for p in problems), problems
    assert any(p.startswith(f"{path}:9:9: spec.matrix.model[1]: repeats spec.matrix.model[0]")
               for p in problems), problems
    assert any(p.startswith(f"{path}:12:15: spec.template.storage.path: a member's storage")
               for p in problems), problems


def test_member_names_collide_with_a_lineage_and_another_set(tmp_path: Path) -> None:
    _write(tmp_path, "apiVersion: ouro/v1\nkind: LineageSet\nmetadata: {name: twin}\n"
           "spec: {replicas: 2, template: {generations: 1, model: {provider: echo}}}\n"
           "---\napiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: twin-1}\n"
           "spec: {generations: 1, model: {provider: echo}}\n", "a.yaml")
    _write(tmp_path, "apiVersion: ouro/v1\nkind: LineageSet\nmetadata: {name: twin}\n"
           "spec: {template: {generations: 1, model: {provider: echo}}}\n", "b.yaml")
    with pytest.raises(SpecError) as caught:
        load_specs([tmp_path / "a.yaml", tmp_path / "b.yaml"], state_dir=tmp_path / "s")
    problems = [str(p) for p in caught.value.problems]
    assert any(p.startswith(f"{tmp_path / 'a.yaml'}:8:18: metadata.name: lineage 'twin-1' is "
                            f"already defined at {tmp_path / 'a.yaml'}:3:18") for p in problems)
    assert any(p.startswith(f"{tmp_path / 'b.yaml'}:3:18: metadata.name: member twin-0 of set "
                            "twin: lineage 'twin-0' is already defined")
               for p in problems), problems


def test_a_members_place_problem_names_the_member(tmp_path: Path) -> None:
    path = _write(tmp_path, "apiVersion: ouro/v1\nkind: LineageSet\nmetadata: {name: far}\n"
                  "spec: {template: {generations: 1, model: {provider: echo}}}\n")
    problems = _problems(path, Path("/proc/ouro-sets-test"))
    assert problems[0].startswith(f"{path}:4:7: spec.storage.path: member far-0 of set far: "
                                  "/proc/ouro-sets-test/far-0 is under /proc"), problems


def test_the_example_validates_and_the_schema_knows_both_kinds() -> None:
    example = REPO / "examples" / "sweep.yaml"
    result = CliRunner().invoke(app, ["validate", str(example), "--state-dir", "/nonexistent"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: 4 lineages in 1 file: sweep-replay-")
    schema = json.loads((REPO / "schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    document = YAML(typ="safe", pure=True).load(example.read_text())
    assert not list(validator.iter_errors(document))
    document["spec"]["bogus"] = 1
    assert list(validator.iter_errors(document))
    del document["spec"]["bogus"]
    document["spec"]["template"]["generations"] = -1
    assert list(validator.iter_errors(document))
    document["kind"] = "Lineage"  # a set's body is not a lineage's
    document["spec"]["template"]["generations"] = 1
    assert list(validator.iter_errors(document))
