"""Installing ouro: declared dependencies, the pinned set, CI = README, a wheel that runs.

A dependency that ouro imports but pyproject.toml does not declare, or that
constraints.txt does not pin, fails here (and a clean venv in CI fails on it too).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pygit2
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from reconciler import __version__
from reconciler.state import instrument
from tests.host import require

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements(extra: str | None = None) -> list[Requirement]:
    """The requirements of ouro (extra None) or of one extra, `ouro[other]` expanded."""
    project = PYPROJECT["project"]
    texts = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    found: list[Requirement] = []
    for text in texts:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == canonicalize_name(project["name"]):
            for other in sorted(requirement.extras):
                found.extend(_requirements(other))
        else:
            found.append(requirement)
    return found


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line)
        assert match, f"constraints.txt:{number}: {line!r} is not NAME==VERSION"
        pins[canonicalize_name(match[1])] = match[2]
    return pins


@pytest.mark.parametrize("extra", [None, "test", "view", "mlflow"],
                         ids=["runtime", "test", "view", "mlflow"])
def test_every_declared_dependency_is_pinned_inside_its_bounds(extra: str | None) -> None:
    pins = _pins()
    for requirement in _requirements(extra):
        name = canonicalize_name(requirement.name)
        if name == canonicalize_name(PYPROJECT["project"]["name"]):
            continue  # the test extra includes the view extra: ouro itself
        assert name in pins, f"{requirement} is not pinned in constraints.txt (refresh it)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject's {requirement}"
        )


def test_the_runtime_dependencies_have_upper_bounds() -> None:
    unbounded = [str(r) for r in _requirements() if not any(
        s.operator in ("<", "<=", "==", "~=") for s in r.specifier)]
    assert not unbounded, f"no upper bound: {unbounded}"


def _imported_roots_of(path: Path) -> dict[str, str]:
    """Top-level names imported by one .py file -> the first place importing it."""
    return _imported_roots(path.parent, [path])


def _imported_roots(folder: Path, paths: list[Path] | None = None) -> dict[str, str]:
    """Top-level names imported by the .py files under folder -> one place importing it."""
    roots: dict[str, str] = {}
    for path in paths if paths is not None else sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                roots.setdefault(name.split(".")[0], f"{path.relative_to(ROOT)}:{node.lineno}")
    return roots


def _undeclared(folder: Path, declared: set[str], local: set[str]) -> list[str]:
    providers = importlib.metadata.packages_distributions()
    problems = []
    for root, where in sorted(_imported_roots(folder).items()):
        if root in sys.stdlib_module_names or root in local:
            continue
        dists = {canonicalize_name(d) for d in providers.get(root, [])}
        if not dists & declared:
            problems.append(f"{where}: imports {root!r} (from {sorted(dists) or 'nowhere'})")
    return problems


VIEWER = ROOT / "reconciler" / "viewer"
MLFLOW_EXPORT = ROOT / "reconciler" / "engine" / "mlflow_export.py"


def test_reconciler_imports_only_declared_dependencies() -> None:
    declared = {canonicalize_name(r.name) for r in _requirements()}
    problems = [problem for problem in _undeclared(ROOT / "reconciler", declared, {"reconciler"})
                if not problem.startswith((str(VIEWER.relative_to(ROOT)),
                                           str(MLFLOW_EXPORT.relative_to(ROOT))))]
    assert not problems, "undeclared runtime dependencies:\n" + "\n".join(problems)


def test_only_the_viewer_imports_the_view_extra() -> None:
    """The default install runs the main job: the view extra's libraries are imported
    only by the viewer's package (which `ouro view` enters after checking for them)."""
    declared = {canonicalize_name(r.name) for r in [*_requirements(), *_requirements("view")]}
    assert not _undeclared(VIEWER, declared, {"reconciler"})
    providers = importlib.metadata.packages_distributions()
    view = {canonicalize_name(r.name) for r in _requirements("view")}
    for root, where in _imported_roots(ROOT / "reconciler").items():
        dists = {canonicalize_name(d) for d in providers.get(root, [])}
        if dists & view:
            assert where.startswith(str(VIEWER.relative_to(ROOT))), f"{where} imports {root}"


def test_only_the_mlflow_export_imports_the_mlflow_extra() -> None:
    """`ouro export --to mlflow` checks for the extra, then enters its one module."""
    assert f"{DISTRIBUTION}[mlflow]" in PYPROJECT["project"]["optional-dependencies"]["test"]
    providers = importlib.metadata.packages_distributions()
    extra = {canonicalize_name(r.name) for r in _requirements("mlflow")}
    assert extra == {"mlflow-skinny", "sqlalchemy", "alembic"}  # alembic: sqlite's migrations
    seen = []
    for path in sorted((ROOT / "reconciler").rglob("*.py")):
        for root, where in _imported_roots_of(path).items():
            if {canonicalize_name(d) for d in providers.get(root, [])} & extra:
                seen.append(where)
                assert path == MLFLOW_EXPORT, f"{where} imports {root}"
    assert seen, "the mlflow export imports no MLflow module"


def test_tests_import_only_declared_dependencies() -> None:
    declared = {canonicalize_name(r.name) for r in [*_requirements(), *_requirements("test")]}
    local = {"reconciler", "tests", "conftest", "helpers", "builder", "organism_harness",
             "measure_overhead"}
    problems = _undeclared(ROOT / "tests", declared, local)
    assert not problems, "undeclared test dependencies:\n" + "\n".join(problems)


def test_no_module_imports_click() -> None:
    # typer >= 0.29 bundles its own click; `import click` works only where click is there
    # by chance (the bug this guards against). typer's own names are the interface.
    users = {root: where for root, where in _imported_roots(ROOT / "reconciler").items()}
    assert "click" not in users, f"{users.get('click')}: imports click"


def _readme_block(heading_words: str) -> str:
    text = (ROOT / "README.md").read_text()
    at = text.index(heading_words)
    block = re.search(r"```sh\n(.*?)\n```", text[at:], re.S)
    assert block, f"no sh block after {heading_words!r}"
    return block[1].strip()


def test_ci_runs_the_readme_test_command_in_a_fresh_venv() -> None:
    readme = _readme_block("Install and run the tests")
    script = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in script.splitlines()
                if line.strip().startswith(('python3 -m venv', '"$venv/bin/python"'))]
    ci = " && ".join(commands).replace('"$venv"', ".venv").replace('"$venv/bin/python"',
                                                                    ".venv/bin/python")
    ci = ci.replace(" || status=$?", "")
    assert ci == readme, f"README:\n  {readme}\n.ci/run:\n  {ci}"
    assert "-c constraints.txt" in readme


def test_readme_install_uses_a_venv_and_the_constraints() -> None:
    readme = _readme_block("Install and run the main job")
    words = shlex.split(readme.replace("&&", " "))
    assert "python3-venv" in words
    assert "-c" in words and "constraints.txt" in words
    assert not re.search(r"(^|&& )python3 -m pip", readme), "pip into the system Python"
    apt = re.search(r'APT_PACKAGES=\(([^)]*)\)', (ROOT / ".ci" / "run").read_text())
    assert apt, ".ci/run has one APT_PACKAGES list"
    for package in ("bubblewrap", "emacs-nox", "curl", "git", "python3-venv"):
        assert package in apt[1].split()


def test_the_build_writes_the_file_the_instrument_reads() -> None:
    tree = ast.parse((ROOT / "setup.py").read_text())
    found = None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "BUILD_COMMIT" and isinstance(node.value, ast.Call)):
            found = Path(*(ast.literal_eval(arg) for arg in node.value.args))
    assert found is not None, "setup.py names BUILD_COMMIT"
    assert ROOT / found == instrument.BUILD_COMMIT_FILE.resolve()


DISTRIBUTION = "ouro-lineages"  # "ouro" on the package index is another project
# pip's options that take a value (the value is a file, folder or URL, not a requirement)
_PIP_VALUED = {"-c", "--constraint", "-r", "--requirement", "-t", "--target", "-w",
               "--wheel-dir", "-i", "--index-url", "--extra-index-url", "-f", "--find-links",
               "-e", "--editable", "--prefix", "--root"}


def _pip_requirements(text: str) -> list[str]:
    """The requirements (not paths, options or files) of every `pip install` / `pipx install`
    command in ``text``: commands end at a line end, a backtick, a quote-less `&&`, `;`, `|`."""
    found: list[str] = []
    for command in re.split(r"\n|`|&&|;|\|", text):
        match = re.search(r"\bpipx? install\b(.*)", command)
        if not match:
            continue
        try:
            words = shlex.split(match[1])
        except ValueError:
            words = match[1].split()
        previous = ""
        for word in words:
            if not word.startswith("-") and previous not in _PIP_VALUED \
                    and not word.startswith((".", "/", "$", "~")) \
                    and not word.endswith((".whl", ".tar.gz", ".txt")) and "/" not in word:
                found.append(word)
            previous = word
    return found


def test_no_hint_names_another_projects_distribution() -> None:
    """Every `pip install` a user is shown names ouro as ouro-lineages (or a checkout)."""
    assert PYPROJECT["project"]["name"] == DISTRIBUTION
    assert PYPROJECT["project"]["scripts"] == {"ouro": "reconciler.cli:console_main"}
    assert f"{DISTRIBUTION}[view]" in PYPROJECT["project"]["optional-dependencies"]["test"]
    places = [ROOT / "README.md", ROOT / "setup.py", *sorted((ROOT / "docs").rglob("*.md")),
              *sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file()),
              *sorted((ROOT / "specs").glob("*.yaml")),
              *sorted((ROOT / "reconciler").rglob("*.py")),
              *sorted((ROOT / "reconciler").rglob("*.html")), ROOT / ".ci" / "run"]
    wrong = []
    for path in places:
        for requirement in _pip_requirements(path.read_text(errors="replace")):
            named = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip("'\"()[]{},:"))
            if not named:
                continue  # a word of a sentence around a command, not a requirement
            name = canonicalize_name(named[0])
            if name == "ouro" or (name.startswith("ouro") and name != DISTRIBUTION):
                wrong.append(f"{path.relative_to(ROOT)}: pip install {requirement}")
    assert not wrong, "hints that install another project:\n" + "\n".join(wrong)


def test_the_hint_finder_finds_a_wrong_hint() -> None:
    text = ("run `pip install -U ouro` or pip install 'ouro[view]' && ouro view;\n"
            "pip install -q -c constraints.txt -e '.[view]' && .venv/bin/ouro apply specs/")
    assert _pip_requirements(text) == ["ouro", "ouro[view]"]


def _kernel_is_committed() -> tuple[bool, str]:
    repo = pygit2.Repository(str(ROOT))
    if repo.head_is_unborn:
        return False, "no commit"
    dirty = [p for p, f in repo.status().items() if p.startswith("reconciler/kernel/")
             and f not in (pygit2.GIT_STATUS_CURRENT, pygit2.GIT_STATUS_IGNORED)
             and not p.endswith(".pyc")]
    return not dirty, f"kernel files not committed: {dirty[:3]}"


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OURO_INSTRUMENT", "PYTHON", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_built_wheel_installs_and_applies_the_default_fleet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require(shutil.which("bwrap") is not None and shutil.which("emacs") is not None,
            "needs bubblewrap and Emacs")
    committed, why = _kernel_is_committed()
    require(committed, f"a wheel records HEAD only for committed physics: {why}")
    monkeypatch.delenv("OURO_INSTRUMENT_COMMIT")
    expected = instrument.commit()  # what this checkout is, read from its git

    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, env=_clean_env(), timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("ouro_lineages-*.whl")

    bin_dir = _venv(tmp_path / "venv")
    installed = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", "-c",
         str(ROOT / "constraints.txt"), str(wheel)],
        capture_output=True, text=True, env=_clean_env(), timeout=600)
    assert installed.returncode == 0, installed.stderr

    work = tmp_path / "elsewhere"  # no git checkout anywhere above it
    shutil.copytree(ROOT / "specs", work / "specs")
    env = _clean_env(OURO_STATE_DIR=str(tmp_path / "state"))
    ouro = str(bin_dir / "ouro")
    done = subprocess.run([ouro, "apply", "--yes", "specs/"], cwd=work, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    status = subprocess.run([ouro, "status", "--json", "specs/"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    version = subprocess.run([ouro, "--version"], cwd=work, env=env, capture_output=True,
                             text=True, timeout=60)
    assert f"instrument commit: {expected}" in version.stdout, version.stdout + version.stderr
    metadata_version = subprocess.run(
        [str(bin_dir / "python"), "-c",
         f"import importlib.metadata as m; print(m.version({DISTRIBUTION!r}))"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert metadata_version.stdout.split() == [__version__], metadata_version.stderr
    for name in ("scribe", "quiet"):
        lineage = tmp_path / "state" / f"{name}.git"
        repo = pygit2.Repository(str(lineage))
        root = repo.references[f"refs/heads/lineage-{name}"].peel(pygit2.Commit)
        while root.parents:
            root = root.parents[0]
        metadata = json.loads(root.tree[".ouroboros-lineage.json"].data)
        assert metadata["instrument_commit"] == expected, metadata
