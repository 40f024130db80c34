"""spec.selection on a LineageSet (issue 39, item 1): valid ones load, every mistake is
refused at FILE:LINE:COL naming the field and the remedy, and a set without selection
loads exactly as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.spec.load import load_specs

SET = """\
apiVersion: ouro/v1
kind: LineageSet
metadata: {{name: {name}}}
spec:
  replicas: 8
  template:
    generations: 2
    model: {{provider: echo}}
    probes:
      - {{name: size, run: [sh, -c, "wc -c < organism.el"]}}
{selection}"""
TRUNCATION = """\
  selection:
    every: 2
    epochs: 3
    by: probe.size.bytes
    method: truncation
    keep: 4
    seed: 7
"""


def _load(tmp_path: Path, selection: str, name: str = "pop") -> str | list[str]:
    path = tmp_path / "pop.yaml"
    path.write_text(SET.format(name=name, selection=selection))
    try:
        return [spec.name for spec in load_specs([path], state_dir=tmp_path / "state")]
    except SpecError as error:
        return str(error).replace(f"{path}:", "pop.yaml:")


def test_a_truncation_selection_loads(tmp_path: Path) -> None:
    assert _load(tmp_path, TRUNCATION) == [f"pop-{i}" for i in range(8)]


def test_a_set_without_selection_loads_as_before(tmp_path: Path) -> None:
    assert _load(tmp_path, "") == [f"pop-{i}" for i in range(8)]


@pytest.mark.parametrize(("selection", "said"), [
    (TRUNCATION.replace("every: 2", "every: 3"),
     "pop.yaml:12:12: spec.selection.every: an epoch is one run of each member's spec: "
     "every must equal spec.template.generations (2), not 3"),
    (TRUNCATION.replace("probe.size.bytes", "probe.speed.ms"),
     "pop.yaml:14:9: spec.selection.by: 'probe.speed.ms' names probe 'speed', which the "
     "template does not declare (its probes: size): add it to spec.template.probes"),
    (TRUNCATION.replace("probe.size.bytes", "fitness"),
     "pop.yaml:14:9: spec.selection.by: 'fitness' is no per-generation number"),
    (TRUNCATION.replace("    keep: 4\n", ""),
     "pop.yaml:15:13: spec.selection.keep: truncation keeps the best `keep` members each "
     "epoch: give keep (e.g. keep: 4)"),
    (TRUNCATION.replace("keep: 4", "keep: 9"),
     "pop.yaml:16:11: spec.selection.keep: keep 9 is more than the set's 8 members: "
     "lower it"),
    (TRUNCATION.replace("truncation", "tournament"),
     "pop.yaml:15:13: spec.selection.tournament: tournament draws `size` members per "
     "tournament: give tournament: {size: 3}"),
    (TRUNCATION.replace("truncation", "roulette"),
     "pop.yaml:15:13: spec.selection.method: must be 'truncation', 'tournament' or "
     "'map-elites', not string 'roulette'"),
    (TRUNCATION.replace("truncation", "map-elites").replace("    keep: 4\n", "")
     + "    map-elites: {descriptors: [{by: organism_bytes, bins: [10, 5]}]}\n",
     "pop.yaml:17:"),
    (TRUNCATION.replace("truncation", "map-elites").replace("    keep: 4\n", "")
     + "    map-elites: {descriptors: [{by: probe.x.y, bins: [10]}]}\n",
     "spec.selection.map-elites.descriptors[0].by: 'probe.x.y' names probe 'x'"),
    (TRUNCATION + "    tournament: {size: 1}\n",
     "spec.selection.tournament.size: must be at least 2"),
])
def test_a_mistake_is_refused_at_its_place(tmp_path: Path, selection: str, said: str) -> None:
    found = _load(tmp_path, selection)
    assert isinstance(found, str), found
    assert said in found, found
    assert "Traceback" not in found


def test_a_name_too_long_for_the_new_members_is_refused(tmp_path: Path) -> None:
    found = _load(tmp_path, TRUNCATION.replace("epochs: 3", "epochs: 1000"), name="p" * 57)
    assert isinstance(found, str)
    assert "spec.selection.epochs: new members are named <set>-e<epoch>-<i>" in found
