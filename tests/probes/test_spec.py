"""spec.probes and spec.until: names, files confined to the spec's tree, digests, positions."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.spec import probes as ps
from reconciler.spec.load import load_specs

BASE = """\
apiVersion: ouro/v1
kind: Lineage
metadata:
  name: alpha
spec:
  generations: 2
  model:
    provider: echo
"""

PROBE = """\
  probes:
    - name: loads
      run: [emacs, -Q, --batch, -l, /probe/loads.el]
      files: probes/loads
      ceilings: {wall: 60s, cpu: 30s, memory: 512MiB}
  until:
    - {probe: loads, metric: score, at_least: 0.9}
    - {probe: loads, metric: score, plateau: 50}
"""


def spec_at(folder: Path, body: str, files: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if files:
        (folder / "probes" / "loads").mkdir(parents=True, exist_ok=True)
        (folder / "probes" / "loads" / "loads.el").write_text("(princ \"{}\")\n")
    path = folder / "a.yaml"
    path.write_text(BASE + body)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_specs([path])
    return [str(p) for p in caught.value.problems]


def test_the_issues_example_loads_with_its_values(tmp_path: Path) -> None:
    (loaded,) = load_specs([spec_at(tmp_path, PROBE)])
    (probe,) = loaded.spec.spec.probes
    assert probe.name == "loads"
    assert probe.run == ["emacs", "-Q", "--batch", "-l", "/probe/loads.el"]
    assert probe.files == tmp_path / "probes" / "loads"
    assert (probe.ceilings.wall, probe.ceilings.cpu, probe.ceilings.memory) == (60, 30, 512 << 20)
    first, second = loaded.spec.spec.until
    assert (first.probe, first.metric, first.at_least, first.plateau) == ("loads", "score", 0.9,
                                                                          None)
    assert second.plateau == 50


def test_no_probes_is_the_default(tmp_path: Path) -> None:
    (loaded,) = load_specs([spec_at(tmp_path, "", files=False)])
    assert loaded.spec.spec.probes == [] and loaded.spec.spec.until == []


@pytest.mark.parametrize(("body", "where", "says"), [
    (PROBE.replace("name: loads", "name: Loads"), "10:13",
     "must be lower-case letters, digits and '-'"),
    (PROBE.replace("run: [emacs, -Q, --batch, -l, /probe/loads.el]", "run: []"), "11:12",
     "at least 1"),
    (PROBE.replace("metric: score, at_least", "metric: score, at_most: 1, at_least"), "15:7",
     "exactly one of at_least, at_most or plateau"),
    (PROBE.replace("{probe: loads, metric: score, plateau", "{probe: lods, metric: score, plateau"),
     "15:5", "does not define"),
    (PROBE.replace("files: probes/loads", "files: probes/none"), "12:14", "does not exist"),
    (PROBE.replace("files: probes/loads", "files: /etc"), "12:14",
     "not a folder inside the spec file's folder"),
    (PROBE.replace("files: probes/loads", "files: ../outside"), "12:14",
     "not a folder inside the spec file's folder"),
    (PROBE.replace("plateau: 50", "plateau: 0"), "16:46", "at least 1"),
])
def test_bad_probe_fields_are_placed(tmp_path: Path, body: str, where: str, says: str) -> None:
    path = spec_at(tmp_path / "spec", body)
    (tmp_path / "outside").mkdir()
    found = problems(path)
    assert any(f"{path}:{where}" in p and says in p for p in found), found


def test_a_link_out_of_the_spec_tree_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("hunter2")
    path = spec_at(tmp_path / "spec", PROBE.replace("probes/loads", "probes/linked"))
    os.symlink(secret, tmp_path / "spec" / "probes" / "linked")
    (found,) = problems(path)
    link = tmp_path / "spec" / "probes" / "linked"
    assert f"{path}:12:14" in found and f"{link} is a symbolic link; ouro reads no spec " \
        "through a link: replace it with the folder" in found
    assert str(secret) not in found and "hunter2" not in found


def test_a_link_inside_the_files_is_refused(tmp_path: Path) -> None:
    path = spec_at(tmp_path, PROBE)
    os.symlink("/etc/passwd", tmp_path / "probes" / "loads" / "passwd")
    (found,) = problems(path)
    assert f"{path}:12:14" in found and "is a link" in found


def test_duplicate_probe_names_are_refused(tmp_path: Path) -> None:
    twice = PROBE.replace("  until:", "    - {name: loads, run: [/bin/true]}\n  until:")
    found = problems(spec_at(tmp_path, twice))
    assert any("two probes are named 'loads'" in p for p in found), found


def test_files_tree_is_gits_tree_id(tmp_path: Path) -> None:
    folder = tmp_path / "files"
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / "a.el").write_text("(a)")
    (folder / "sub.el").write_text("x")  # sorts between 'sub' (a folder) and others
    (folder / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (folder / "sub" / "run.sh").chmod(0o755)
    (folder / "sub" / "deeper" / "z").write_bytes(b"\0\1")
    subprocess.run(["git", "init", "-q", str(tmp_path / "g")], check=True)
    env = {**os.environ, "GIT_DIR": str(tmp_path / "g" / ".git"), "GIT_WORK_TREE": str(folder)}
    subprocess.run(["git", "add", "-A"], check=True, env=env, cwd=folder)
    tree = subprocess.run(["git", "write-tree"], check=True, env=env, capture_output=True,
                          text=True).stdout.strip()
    assert ps.read_probe_files(folder).tree_id() == tree


def test_the_digest_changes_with_argv_files_and_ceilings_not_the_name(tmp_path: Path) -> None:
    (loaded,) = load_specs([spec_at(tmp_path, PROBE)])
    (probe,) = loaded.spec.spec.probes
    tree = ps.read_probe_files(tmp_path / "probes" / "loads").tree_id()
    digest = ps.probe_digest(probe, tree)
    assert ps.probe_digest(probe.model_copy(update={"name": "other"}), tree) == digest
    assert ps.probe_digest(probe.model_copy(update={"run": ["true"]}), tree) != digest
    (tmp_path / "probes" / "loads" / "loads.el").write_text("(princ \"{ }\")\n")
    assert ps.probe_digest(probe, ps.read_probe_files(tmp_path / "probes" / "loads")
                           .tree_id()) != digest
    faster = probe.ceilings.model_copy(update={"wall": 61})
    assert ps.probe_digest(probe.model_copy(update={"ceilings": faster}), tree) != digest
