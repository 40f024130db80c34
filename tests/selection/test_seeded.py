"""Tournament end to end (issue 39): the same set run twice records identical
decisions; another seed records another one, and each verifies clean. (Every member
measures the same here, echo changing nothing: MAP-Elites would put them all in one
bin; its seeded draws are tested on hand-written tables, tests/selection/test_decide.py.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine.epochs import read_record
from reconciler.spec.load import default_places
from tests.apply.helpers import run_ouro
from tests.selection.test_population import POP, _write

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]

SIZE = 'printf \'{"value": %d}\' "$(wc -c < organism.el)"\n'  # the same for every member
METHODS = {"tournament": "method: tournament, tournament: {size: 2}"}


def _run(root: Path, method: str, seed: int) -> dict[str, Any]:
    specs = root / "specs"
    specs.mkdir(parents=True)
    text = POP.replace("replicas: 8", "replicas: 6").replace("epochs: 3", "epochs: 2") \
        .replace("method: truncation, keep: 4", METHODS[method]).replace("seed: 7",
                                                                          f"seed: {seed}")
    _write(specs, text)
    (specs / "probes" / "score" / "score.sh").write_text(SIZE)
    env = {**os.environ, "OURO_STATE_DIR": str(root / "state")}
    applied = run_ouro("apply", "--yes", str(specs), env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert run_ouro("verify", str(specs), env=env).returncode == 0
    record = read_record(default_places(root / "state" / "pop-0", "pop-0"), "pop", 1)
    assert record is not None
    return {key: record[key] for key in ("kept", "stopped", "born")}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_same_seed_decides_the_same_another_seed_otherwise(
        tmp_path: Path, method: str) -> None:
    first = _run(tmp_path / "a", method, 7)
    again = _run(tmp_path / "b", method, 7)
    assert first == again
    others = [_run(tmp_path / f"s{seed}", method, seed) for seed in (1, 2)]
    assert any(other != first for other in others), (first, others)
