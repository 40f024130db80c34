"""examples/fake_server.py, as a user starts it: a real process on 127.0.0.1 that a real
lineage set (examples/fake.yaml, pointed at its port) grows against, generation by
generation in the sandbox; and its replies, per lineage and seeded."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.apply.helpers import report, run_ouro
from tests.host import require
from tests.observe.builder import lineage_paths

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "examples" / "fake_server.py"
SEED_SOURCE = (ROOT / "reconciler" / "kernel" / "transaction" / "organism.el").read_text()


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fake_server", SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prompt(source: str, generations: int) -> str:
    journal = "".join(f"\n## gen {n} — changed\n" for n in range(1, generations + 1))
    return f"instructions\n----- journal.md -----{journal}{_module().MARKER}{source}"


@pytest.fixture
def server() -> Iterator[str]:
    process = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--seed", "7",
                                "--die", "0", "--stay", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        assert found, line
        yield found[0]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_replies_are_whole_organisms_seeded_per_lineage() -> None:
    module = _module()
    fake = module.Fake(seed=7, stay=0.0, die=0.0)
    first, second = fake.reply(_prompt(SEED_SOURCE, 0)), fake.reply(_prompt(SEED_SOURCE, 0))
    ids = [module.LINEAGE.search(text)[1] for text in (first, second)]
    assert ids[0] != ids[1]  # replicas' identical first prompts: two lineages
    for text in (first, second):  # the whole organism, grown by one gene
        assert text.startswith(SEED_SOURCE.split("\n", 1)[0]) and "(organism-live)" in text
        assert module.GENE.findall(text) == ["1"]
    again = module.Fake(seed=7, stay=0.0, die=0.0)
    assert again.reply(_prompt(first, 1)) == fake.reply(_prompt(first, 1))  # seeded
    assert module.Fake(seed=8, stay=0.0, die=0.0).reply(_prompt(first, 1)) != fake.reply(
        _prompt(first, 1))
    assert fake.reply("no organism here") == ""
    dying = module.Fake(seed=7, stay=0.0, die=1.0).reply(_prompt(first, 3))
    assert "(kill-emacs 1)" in dying and "(count-matches \"^## gen \"" in dying
    assert "\n         4)\n" in dying  # its first life sees 4 lives in the journal
    assert module.GENE.findall(dying) == ["1", "2"]


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.cgroup
def test_a_real_set_grows_two_generations_against_the_fake_server(
        server: str, tmp_path: Path) -> None:
    require(shutil.which("bwrap") is not None and shutil.which("emacs") is not None,
            "needs bwrap and emacs")
    spec = tmp_path / "fake.yaml"
    text = (ROOT / "examples" / "fake.yaml").read_text()
    assert "http://127.0.0.1:8765/v1" in text
    spec.write_text(text.replace("http://127.0.0.1:8765/v1", server)
                    .replace("generations: 3", "generations: 2"))
    env = {**os.environ, "OURO_STATE_DIR": str(tmp_path / "state")}
    applied = run_ouro("apply", "--yes", "--json", str(spec), env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    lineages = report(applied)["lineages"]
    assert sorted(item["name"] for item in lineages) == ["fake-0", "fake-1"]
    assert all(item["generations_run"] == 2 for item in lineages), lineages
    log = run_ouro("log", "--json", "fake-0", "fake-1", env=env)
    assert log.returncode == 0, log.stderr
    ids = set()
    for item in json.loads(log.stdout)["lineages"]:
        assert [row["status"] for row in item["rows"]] == ["seed", "changed", "changed"], item
        assert all(row["model_calls"] == 1 for row in item["rows"][1:]), item  # not the seed
        organism = (lineage_paths(tmp_path / "state", item["name"]).worktree
                    / "organism.el").read_text()
        assert re.findall(r"^\(defun fake-gene-(\d+) ", organism, re.M) == ["1", "2"]
        ids.add(re.search(r"^;; fake-lineage: (\w+)$", organism, re.M)[1])
    assert len(ids) == 2  # each replica its own history
