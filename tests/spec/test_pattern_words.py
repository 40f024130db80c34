"""A name that breaks its rule is told the rule in words, never as a regular expression
(issue 41 item 9): every name pattern has its words (``spec.names.WORDS``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.spec import names
from reconciler.spec.load import load_specs

SPEC = """\
apiVersion: ouro/v1
kind: Lineage
metadata: {{name: words}}
spec:
  generations: 1
  model: {{provider: echo}}
  probes:
    - {{name: {probe}, run: [sh, -c, "echo '{{}}'"]}}
"""


def test_every_name_pattern_has_its_words() -> None:
    assert {rule.pattern for rule in names.NAME_PATTERNS.values()} <= set(names.WORDS)


@pytest.mark.parametrize("probe", ["Bad_Name", "'-starts-with-a-dash'", "'x\\n'"])
def test_a_bad_probe_name_is_told_in_words(tmp_path: Path, probe: str) -> None:
    spec = tmp_path / "words.yaml"
    spec.write_text(SPEC.format(probe=probe), encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_specs([spec], state_dir=tmp_path / "state")
    text = str(caught.value)
    assert "words.yaml:8:" in text
    assert "lower-case letters, digits and '-'" in text
    assert "^[" not in text and "pattern" not in text
