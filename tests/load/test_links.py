"""A spec read through a link, and a file that is no spec: nothing of either is quoted back.

The attack (issue 36, item 1): a commit adds ``specs/leak.yaml`` linking to a 0600
environment file of API keys; whatever reads specs (validate, plan, plan --markdown
in CI, the controller's checkout) must refuse the link by its name, never read
through it, and no message may quote a byte of a file that did not parse as a
spec. Run as a user would: the ``ouro`` command, in a process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.inprocess import ouro

KEY = "sk-proj-FAKEKEY0123456789abcdefLEAK"
ENV_FILE = f"OPENAI_API_KEY={KEY}\nANTHROPIC_API_KEY=sk-ant-{KEY}\n"
VALID = """\
apiVersion: ouro/v1
kind: Lineage
metadata: {name: fine}
spec: {generations: 1, model: {provider: echo}}
"""
COMMANDS = [["validate"], ["plan"], ["plan", "--markdown"], ["plan", "--json"]]


def _secret(tmp_path: Path, text: str = ENV_FILE) -> Path:
    secret = tmp_path / "host" / ".env"
    secret.parent.mkdir()
    secret.write_text(text)
    secret.chmod(0o600)
    return secret


Ouro = Callable[[list[str], list[Path], Path], tuple[int, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Ouro:
    """The command in this process: its exit code, and stdout and stderr together."""
    def run(args: list[str], paths: list[Path], state: Path) -> tuple[int, str]:
        code, out, err = ouro(monkeypatch, capsys, *args, *paths, "--state-dir", state)
        return code, out + err
    return run


def _ouro_process(args: list[str], paths: list[Path], state: Path) -> tuple[int, str]:
    """The command in a process of its own, as CI runs it."""
    run = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli import main; main()", *args,
         *map(str, paths), "--state-dir", str(state)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "NO_COLOR": "1"})
    return run.returncode, run.stdout + run.stderr


def _no_leak(output: str) -> None:
    assert KEY not in output and "API_KEY" not in output and "FAKEKEY" not in output, output
    assert "Traceback" not in output


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_linked_spec_file_is_refused_by_name_and_never_quoted(
        cli: Ouro, tmp_path: Path, args: list[str]) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "fine.yaml").write_text(VALID)
    (specs / "leak.yaml").symlink_to(_secret(tmp_path))
    code, output = cli(args, [specs], tmp_path / "state")
    assert code == 1, output
    _no_leak(output)
    assert (f"{specs}/leak.yaml:1:1: {specs}/leak.yaml is a symbolic link; ouro reads no "
            "spec through a link: replace it with the file") in output


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_linked_folder_is_refused_by_name_and_never_entered(
        cli: Ouro, tmp_path: Path, args: list[str]) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "fine.yaml").write_text(VALID)
    secret = _secret(tmp_path)
    (secret.parent / "keys.yaml").write_text(ENV_FILE)  # a regular file behind the link
    (specs / "more").symlink_to(secret.parent)
    code, output = cli(args, [specs], tmp_path / "state")
    assert code == 1, output
    _no_leak(output)
    assert (f"{specs}/more:1:1: {specs}/more is a symbolic link; ouro reads no spec through "
            "a link: replace it with the folder") in output


@pytest.mark.parametrize("named", ["file", "folder"])
def test_a_link_named_on_the_command_line_is_refused(
        cli: Ouro, tmp_path: Path, named: str) -> None:
    secret = _secret(tmp_path)
    link = tmp_path / "spec.yaml"
    link.symlink_to(secret if named == "file" else secret.parent)
    code, output = cli(["validate"], [link], tmp_path / "state")
    assert code == 1
    _no_leak(output)
    assert f"{link} is a symbolic link; ouro reads no spec through a link: replace it " \
        f"with the {named}" in output


@pytest.mark.parametrize("text", [
    ENV_FILE,  # one plain scalar
    f"export OPENAI_API_KEY='{KEY}'\n",
    f"OPENAI_API_KEY: {KEY}\nOPENAI_API_KEY: {KEY}\n",  # a mapping with a duplicate key
    f"apiVersion: {KEY}\nkind: Lineage\n",  # a header that is no spec's
    f"kind: {KEY}\napiVersion: ouro/v1\n",
    f"key: \"{KEY}\n",  # an unclosed quote
    f"a: b: {KEY}\n",  # mapping values not allowed here
    f"[{KEY}\n",  # an unclosed flow sequence
    f"*{KEY}\n",  # an undefined alias
    f"!{KEY} x\n",  # an unknown tag
    f"a: 1\n\t{KEY}\n",  # a tab
    f"a: \"\\q{KEY}\"\n",  # an unknown escape
    f"{KEY}: [1, 2\n",
], ids=["env", "export", "duplicate-key", "api-version", "kind", "unclosed-quote",
        "mapping-value", "flow", "alias", "tag", "tab", "escape", "unclosed-flow"])
def test_a_regular_file_that_is_no_spec_is_named_by_place_and_kind_only(
        cli: Ouro, tmp_path: Path, text: str) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "leak.yaml").write_text(text)
    for args in (["validate"], ["plan", "--markdown"]):
        code, output = cli(args, [specs], tmp_path / "state")
        assert code == 1, output
        _no_leak(output)
        assert f"{specs}/leak.yaml:" in output


@pytest.mark.parametrize("args", [["validate"], ["plan", "--markdown"]], ids=" ".join)
def test_in_a_process_of_its_own_too(tmp_path: Path, args: list[str]) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "leak.yaml").symlink_to(_secret(tmp_path))
    (specs / "syntax.yaml").write_text(f"a: b: {KEY}\n")
    code, output = _ouro_process(args, [specs], tmp_path / "state")
    assert code == 1, output
    _no_leak(output)
    assert f"{specs}/leak.yaml is a symbolic link" in output
    assert f"{specs}/syntax.yaml:1:5: YAML syntax error: mapping values are not allowed here" \
        in output


def test_the_loader_opens_no_link_even_one_made_after_listing(tmp_path: Path) -> None:
    """A file replaced by a link between listing and reading is not followed (O_NOFOLLOW)."""
    from reconciler.errors import Problem
    from reconciler.spec.sources import Source, read_text

    link = tmp_path / "spec.yaml"
    link.symlink_to(_secret(tmp_path))
    problems: list[Problem] = []
    assert read_text(Source(str(link), link), problems) is None
    (found,) = problems
    assert "is a symbolic link" in found.message and KEY not in str(found)


def test_the_controllers_checkout_refuses_a_committed_link(tmp_path: Path) -> None:
    """The controller validates a commit in its candidate checkout through the loader: a
    link committed to the spec repository (mode 120000) is refused there by name."""
    import pygit2

    from reconciler.engine.controller.source import SpecSource
    from reconciler.errors import SpecError
    from reconciler.spec.load import load_specs

    secret = _secret(tmp_path)
    origin = pygit2.init_repository(str(tmp_path / "origin"), bare=True)
    builder = origin.TreeBuilder()
    builder.insert("fine.yaml", origin.create_blob(VALID.encode()), pygit2.GIT_FILEMODE_BLOB)
    builder.insert("leak.yaml", origin.create_blob(str(secret).encode()),
                   pygit2.GIT_FILEMODE_LINK)
    author = pygit2.Signature("t", "t@example.invalid")
    origin.create_commit("refs/heads/main", author, author, "a link", builder.write(), [])
    source = SpecSource(str(tmp_path / "origin"), "main", tmp_path / "cache")
    folder = source.export(source.fetch())
    assert (folder / "leak.yaml").is_symlink()  # git checked the link out as a link
    with pytest.raises(SpecError) as raised:
        load_specs([folder], state_dir=tmp_path / "state")
    assert str(raised.value) == (f"{folder}/leak.yaml:1:1: {folder}/leak.yaml is a symbolic "
                                 "link; ouro reads no spec through a link: replace it with "
                                 "the file")
