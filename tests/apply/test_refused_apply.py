"""A refused apply changes nothing: not the lineage, not the folder it lives in.

Apply on lineages with the original instrument's layout (branches named after the
folder, specs that leave them unset), and on a spec whose model apply could not
start: every reason is reported, and no lock file is left behind.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tests.apply.helpers import report, run_ouro, write_spec
from tests.plan.original import ORIGINAL, peer


def snapshot(root: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            found[str(path.relative_to(root))] = (
                f"{path.lstat().st_mode:o}:{hashlib.sha256(data).hexdigest()}")
    return found


def env_for(tmp_path: Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k != "OURO_TEST_ABSENT_KEY"}
    environment["OURO_STATE_DIR"] = str(tmp_path / "state")
    return environment


def test_applying_to_the_original_instruments_lineage_changes_nothing(tmp_path: Path) -> None:
    lineages = tmp_path / "lineages"
    peer(lineages)
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "peer", 5, storage=str(lineages / "peer"))
    write_spec(specs, "keyless", 1, provider="openai", storage=str(lineages / "keyless"),
               extra_model="name: gpt-5.6\napi_key_env: OURO_TEST_ABSENT_KEY")
    before = snapshot(lineages)
    result = run_ouro("apply", "--yes", "--json", str(specs), env=env_for(tmp_path))
    assert result.returncode == 1, result.stderr
    by_name = {item["name"]: item for item in report(result)["lineages"]}
    assert [r["reason"] for r in by_name["peer"]["reasons"]] == ["foreign-kernel"]
    assert ORIGINAL.repository in by_name["peer"]["refusal"]
    assert by_name["peer"]["observed_generations"] == 3
    assert [r["reason"] for r in by_name["keyless"]["reasons"]] == ["provider-config"]
    assert "OURO_TEST_ABSENT_KEY" in by_name["keyless"]["refusal"]
    assert snapshot(lineages) == before  # no lock file, no holder record, nothing


def test_the_plan_apply_prints_lists_every_reason(tmp_path: Path) -> None:
    lineages = tmp_path / "lineages"
    peer(lineages)
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "peer", 5, provider="openai", storage=str(lineages / "peer"),
               extra_model="name: gpt-5.6\napi_key_env: OURO_TEST_ABSENT_KEY")
    result = run_ouro("apply", "--yes", str(specs), env=env_for(tmp_path))
    assert result.returncode == 1
    shown = result.stdout + result.stderr
    assert "foreign-kernel" in shown and "provider-config" in shown
    assert "does not extend" in shown
