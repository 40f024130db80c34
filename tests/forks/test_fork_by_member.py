"""``from: {set, cell, replica, generation}``: a fork of a set's member without copying
its hashed name out of a plan (issue 41, item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.spec.load import LoadedSpec, load_specs

SET = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {name: evo}
spec:
  replicas: 2
  matrix:
    model:
      - {provider: echo, name: steady}
      - {provider: echo, name: wild}
  template: {generations: 5}
"""
FORK = """\
apiVersion: ouro/v1
kind: Lineage
metadata: {{name: branch}}
spec:
  generations: 4
  model: {{provider: echo}}
  from: {{{parent}, generation: 3}}
"""
# A fork by name, digested by a5035bc's loader: the new fields leave its digest alone.
BY_NAME_DIGEST = "67516a09f5ae49b8604cce78eef4c38e35c885869b5777d0d31671de7f7bab39"


def _write(tmp_path: Path, parent: str, with_set: bool = True) -> None:
    (tmp_path / "fork.yaml").write_text(FORK.format(parent=parent))
    if with_set:
        (tmp_path / "set.yaml").write_text(SET)


def _loaded(tmp_path: Path, parent: str, with_set: bool = True) -> dict[str, LoadedSpec]:
    _write(tmp_path, parent, with_set)
    return {spec.name: spec for spec in load_specs([tmp_path], state_dir=tmp_path / "state")}


def _problems(tmp_path: Path, parent: str) -> list[str]:
    _write(tmp_path, parent)
    with pytest.raises(SpecError) as raised:
        load_specs([tmp_path], state_dir=tmp_path / "state")
    return [str(p) for p in raised.value.problems]


def test_the_member_is_found_by_set_cell_and_replica(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "set: evo, cell: {model.name: steady}, replica: 1")
    steady = [name for name, spec in loaded.items() if spec.member is not None
              and spec.member.replica == 1
              and spec.member.matrix["model"]["name"] == "steady"]
    assert len(steady) == 1 and steady[0].startswith("evo-steady-echo-")
    fork, parent = loaded["branch"].fork, loaded["branch"].fork_parent
    assert fork is not None and (fork.lineage, fork.generation) == (steady[0], 3)
    assert parent is not None and parent.name == steady[0]
    assert parent.paths() == loaded[steady[0]].paths()


def test_a_whole_matrix_value_names_the_cell_too(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "set: evo, cell: {model: {provider: echo, name: wild}}, "
                     "replica: 0")
    fork = loaded["branch"].fork
    assert fork is not None
    assert fork.lineage.startswith("evo-wild-echo-") and fork.lineage.endswith("-0")


@pytest.mark.parametrize(("parent", "where", "says"), [
    ("set: evo, replica: 0", "7:9:", "spec.from.cell: matches 2 cells of set 'evo' (its "
     "matrix keys: model): give the values of exactly one cell"),
    ("set: evo, cell: {model.name: calm}, replica: 0", "7:", "spec.from.cell: matches no "
     "cell of set 'evo'"),
    ("set: evo, cell: {model.name: steady}, replica: 2", "7:", "spec.from.replica: the cell "
     "has replicas 0 to 1 in set 'evo': name one of them"),
    ("set: evx, cell: {model.name: steady}, replica: 0", "7:", "spec.from.set: no LineageSet "
     "'evx' is a spec of this run"),
    ("set: evo, cell: {model.name: steady}", "7:", "with set, replica says which member"),
    ("lineage: evo-0, set: evo, replica: 0", "7:", "name the parent once"),
    ("generation: 2", "7:", "name the parent: lineage: NAME, or a set's member"),
    ("lineage: evo-0, replica: 1", "7:", "cell and replica name a member of a set"),
])
def test_a_member_that_cannot_be_found_is_refused_at_its_place(
        tmp_path: Path, parent: str, where: str, says: str) -> None:
    if parent == "generation: 2":
        parent = "kernel: running"
    found = _problems(tmp_path, parent)
    assert any(f"fork.yaml:{where}" in p and says in p for p in found), found


def test_a_fork_by_name_keeps_its_digest(tmp_path: Path) -> None:
    assert _loaded(tmp_path, "lineage: scribe", with_set=False)["branch"].sha256 \
        == BY_NAME_DIGEST
