"""Every command the README shows works verbatim: each `sh` block, in order, in a copy of
the checkout's specs with a state dir of its own, offline; then each command its prose
shows in `code` (an `ouro …`, `. …` or `apt-get …` span), in order. A prose span with a
placeholder (an upper-case word: `ouro controller --repo REPO`) is a form, not a
command: its command and options must exist (its `-h` names every option it uses).

Install steps cannot run offline and are checked instead of run: `apt-get` installs
only packages `.ci/run` installs, `pip install` uses the constraints and an extra
pyproject declares, `pytest` is the suite itself with a marker it declares (and
tests/install checks that `.ci/run` runs the README's test command). A `yaml` block
whose first line is `# PATH` is the file the README asks to save as PATH. `ouro view`
serves until stopped: it is started, its page fetched with the token, and stopped.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from tests.host import require

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def blocks() -> list[tuple[str, str]]:
    return [(kind, body) for kind, body in BLOCK.findall(README)]


def commands(body: str) -> list[str]:
    """A block's commands: one a line, and each `&&` link of a chain on its own."""
    found = []
    for line in body.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            found += [part.strip() for part in line.split(" && ")]
    return found


_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_PLACEHOLDER = re.compile(r"\b[A-Z]{2,}\b")


def prose_commands() -> list[str]:
    """The commands the README's prose shows in `code`, in order (tables are forms)."""
    found = []
    for line in _FENCE.sub("", README).splitlines():
        if line.startswith("|"):
            continue
        for span in re.findall(r"`([^`]+)`", line):
            if span.startswith(("ouro ", ". ", "apt-get ")) and "/" not in span.split()[0]:
                found.append(span)
    return found


def _apt_packages() -> set[str]:
    listed = re.search(r"APT_PACKAGES=\(([^)]*)\)", (ROOT / ".ci" / "run").read_text())
    assert listed, ".ci/run has one APT_PACKAGES list"
    return set(listed[1].split())


def checked_not_run(command: str) -> bool:
    """An install step or the suite itself: check it, and say whether it was one."""
    words = shlex.split(command)
    if words[0] == "apt-get":
        if words[1] == "install":
            packages = {w for w in words[2:] if not w.startswith("-")}
            assert packages <= _apt_packages(), f"{command}: not in .ci/run's APT_PACKAGES"
        return True
    if words[:3] == ["python3", "-m", "venv"]:
        assert words[3:] == [".venv"], command
        return True
    if words[:4] == [".venv/bin/python", "-m", "pip", "wheel"]:
        # the build itself is tests/install/test_publish.py's (and the wheel's install
        # and first apply, tests/install/test_install.py's)
        assert words[4:] == ["-q", "--no-deps", "-w", "dist", "."], command
        return True
    if words[:4] == [".venv/bin/python", "-m", "pip", "install"]:
        assert words[4:7] == ["-q", "-c", "constraints.txt"], command
        if words[7] != "-e":  # the wheel the README's `pip wheel` builds, by its name
            version = PYPROJECT["project"]["version"]
            assert words[7:] == [f"dist/ouro_lineages-{version}-py3-none-any.whl"], command
            return True
        extras = re.fullmatch(r"\.(?:\[(\w+)\])?", words[8])
        assert extras, command
        assert extras[1] is None or extras[1] in PYPROJECT["project"]["optional-dependencies"]
        return True
    if words[:3] == [".venv/bin/python", "-m", "pytest"]:
        if "-m" in words[3:]:
            marker = words[words.index("-m", 3) + 1].removeprefix("not ").strip()
            declared = [m.split(":")[0] for m in PYPROJECT["tool"]["pytest"]["ini_options"]
                        ["markers"]]
            assert marker in declared, f"{command}: marker {marker!r} is not declared"
        return True
    return False


def _view(command: str, cwd: Path, env: dict[str, str]) -> None:
    process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"(http://127\.\d+\.\d+\.\d+:\d+)/\?token=(\S+)", line)
        assert found, f"{command}: printed {line!r}"
        page = httpx.get(f"{found[1]}/?token={found[2]}", timeout=30)
        assert page.status_code == 200 and "scribe" in page.text
    finally:
        process.terminate()
        process.wait(timeout=30)


def check_form(command: str, cwd: Path, env: dict[str, str]) -> None:
    """A command with placeholders: its command exists, and its -h names its options."""
    words = command.split()
    command_words = [w for w in words[:3] if re.fullmatch(r"[a-z]+", w)]
    shown = subprocess.run(["bash", "-c", " ".join([*command_words, "-h"])], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, f"README form {command!r}: {shown.stderr}"
    for option in (w for w in words if w.startswith("--")):
        assert option in shown.stdout, f"README form {command!r}: no {option} in its -h"


def run(command: str, cwd: Path, env: dict[str, str]) -> None:
    if command.startswith("ouro view"):
        _view(command, cwd, env)
        return
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    # plan's 2 is "changes pending"; a usage error is 2 too, and says Usage:
    pending = command.startswith("ouro plan") and "Usage:" not in done.stderr
    allowed = (0, 2) if pending else (0,)
    assert done.returncode in allowed, (
        f"README command {command!r} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.cgroup
def test_every_readme_command_works_verbatim(tmp_path: Path) -> None:
    require(shutil.which("bwrap") is not None and shutil.which("emacs") is not None,
            "needs bwrap and emacs: the README's commands run generations")
    work = tmp_path / "checkout"
    work.mkdir()
    for name in ("specs", "examples"):
        shutil.copytree(ROOT / name, work / name)
    for name in ("schema.json", "constraints.txt"):
        shutil.copy(ROOT / name, work / name)
    (work / ".venv").symlink_to(Path(sys.executable).parent.parent)  # the README's .venv
    env = {**os.environ, "OURO_STATE_DIR": str(tmp_path / "state"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = []
    for kind, body in blocks():
        first = body.splitlines()[0] if body else ""
        if kind == "yaml" and re.fullmatch(r"# [\w./-]+\.ya?ml", first):
            target = work / first[2:]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body, encoding="utf-8")
        if kind != "sh":
            continue
        for command in commands(body):
            if not checked_not_run(command):
                run(command, work, env)
                ran.append(command)
    for command in prose_commands():
        if _PLACEHOLDER.search(command):
            check_form(command, work, env)
        elif not checked_not_run(command):
            run(command, work, env)
            ran.append(command)
    assert any(c.startswith(".venv/bin/ouro apply") for c in ran)
    assert "ouro apply --yes mine/" in ran and "ouro view specs/" in ran
    # the header, then each lineage's row 0 (its seed) and its generations
    assert (work / "generations.csv").read_text().count("\n") == 1 + (1 + 5) + (1 + 3)
    # the experiments: a set, probes, a fork (run from the prose), the reading commands
    for command in ("ouro apply --yes examples/sweep.yaml", "ouro status -l ouro/set=sweep",
                    "ouro apply --yes examples/probes.yaml", "ouro log probed",
                    "ouro apply --yes mine/branch.yaml", "ouro log branch", "ouro status scribe",
                    "ouro verify --full", ". .venv/bin/activate"):
        assert command in ran, command
    assert (work / "sweep.csv").read_text().count("\n") == 1 + 4 * 3  # 4 members, row 0 + 2 gens
    assert (tmp_path / "state" / "branch.git").is_dir()


def test_the_prose_commands_are_found() -> None:
    found = prose_commands()
    assert "ouro apply --yes mine/branch.yaml" in found and "ouro verify --full" in found
    assert "ouro controller --repo REPO" in found  # a form: checked, not run
    assert not [c for c in found if c.startswith(("ouro-", "ouro/"))]


def test_the_readme_is_a_users_page() -> None:
    """At most 240 lines; the kernel's, the layers' and the benchmarks' details live in
    docs/."""
    lines = README.count("\n")
    assert lines <= 240, f"README.md has {lines} lines: move details to docs/"
    prose = re.sub(r"OURO_[A-Z_]+", "", README).lower()  # the variables' names may say it
    for word in ("instrument", "fingerprint", "ouroboros"):
        assert word not in prose, f"README says {word!r}: explain it in docs/"
