"""A probe may declare its metrics; an until naming another is refused at validate
(issue 41, item 4: a typo in an until metric could never be met)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.spec.load import load_specs

SPEC = """\
apiVersion: ouro/v1
kind: Lineage
metadata: {{name: alpha}}
spec:
  generations: 2
  model: {{provider: echo}}
  probes:
    - name: size
      run: [wc, -c, organism.el]
{metrics}  until:
    - {{probe: size, metric: {metric}, at_least: 100}}
"""


def _load(tmp_path: Path, metric: str, metrics: str = "") -> list[str] | str:
    path = tmp_path / "a.yaml"
    path.write_text(SPEC.format(metric=metric, metrics=metrics))
    try:
        (loaded,) = load_specs([path], state_dir=tmp_path / "state")
    except SpecError as error:
        return [str(p) for p in error.problems]
    return loaded.sha256


DECLARED = "      metrics: [bytes, functions]\n"


def test_an_until_naming_an_undeclared_metric_is_refused_at_its_place(tmp_path: Path) -> None:
    found = _load(tmp_path, "byts", DECLARED)
    assert found == [
        f"{tmp_path}/a.yaml:12:5: spec.until: until[0] names the metric 'byts' of probe "
        "'size', which declares only bytes, functions: did you mean 'bytes'? name one of "
        "them, or add it to the probe's metrics"]


def test_a_declared_metric_is_accepted(tmp_path: Path) -> None:
    assert isinstance(_load(tmp_path, "functions", DECLARED), str)


# The spec's digest before ``metrics`` existed (computed by a5035bc's loader): a spec
# that declares none keeps it, so no lineage's recorded spec digest changes.
DIGEST_BEFORE = "590e7671b1ae2f33be6f9236ca75da7a2b98ec9f75688215fedba004b3b55de9"


def test_without_a_declaration_any_metric_is_accepted_and_the_digest_is_as_before(
        tmp_path: Path) -> None:
    assert _load(tmp_path, "byts") == DIGEST_BEFORE


def test_declaring_metrics_keeps_the_probes_digest(tmp_path: Path) -> None:
    (one,) = load_specs([_write(tmp_path / "a", "")], state_dir=tmp_path / "state")
    (two,) = load_specs([_write(tmp_path / "b", DECLARED)], state_dir=tmp_path / "state")
    assert one.probes[0].digest == two.probes[0].digest


def _write(folder: Path, metrics: str) -> Path:
    folder.mkdir()
    path = folder / "a.yaml"
    path.write_text(SPEC.format(metric="bytes", metrics=metrics))
    return path


@pytest.mark.parametrize(("metrics", "says"), [
    ("[]", "name at least one, or leave the field out"),
    ("[bytes, bytes]", "metrics names 'bytes' twice: each once"),
    ('["bytes\\n"]', "must be letters, digits, '_'"),
    ("[by tes]", "must be letters, digits, '_'"),
])
def test_a_bad_declaration_is_refused(tmp_path: Path, metrics: str, says: str) -> None:
    found = _load(tmp_path, "bytes", f"      metrics: {metrics}\n")
    assert isinstance(found, list) and any(
        f"{tmp_path}/a.yaml:10:" in p and "spec.probes.0.metrics" in p and says in p
        for p in found), found
