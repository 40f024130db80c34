"""The command line as a shell sees it: every usage error through ``main()`` in a real
process exits 2 with typer's usage message (never "internal error"); an internal error
is one line and exit 1; --version, -h and shell completion work.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler import __version__
from reconciler.cli import app
from reconciler.cli.kernel import kernel_app
from reconciler.kernel.base import identity

ROOT = Path(__file__).resolve().parents[2]
MAIN = "import sys; from reconciler.cli import main; sys.argv[0] = 'ouro'; main()"
COMMANDS = sorted(str(c.name) for c in app.registered_commands)
NEED_PATHS = ["validate", "plan", "apply"]  # status, verify: none is the state dir's lineages


def ouro(*args: str, env: dict[str, str] | None = None, code: str = MAIN,
         cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd,
                          env=env or dict(os.environ), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


USAGE_ERRORS = [
    pytest.param(["--bogus"], "No such option: --bogus", id="root-unknown-option"),
    pytest.param(["bogus"], "No such command 'bogus'", id="unknown-command"),
    *(pytest.param([c, "--bogus"], "No such option: --bogus", id=f"{c}-unknown-option")
      for c in COMMANDS),
    *(pytest.param([c], "Missing argument", id=f"{c}-missing-paths") for c in NEED_PATHS),
    pytest.param(["schema", "extra"], "unexpected extra argument", id="schema-extra-argument"),
    pytest.param(["apply", "specs", "--parallel", "0"], "Invalid value", id="parallel-0"),
    pytest.param(["apply", "specs", "--parallel", "two"], "Invalid value", id="parallel-word"),
    pytest.param(["apply", "specs", "--parallel"], "requires an argument", id="parallel-bare"),
    pytest.param(["apply", "specs", "--max-generations", "-1"], "Invalid value",
                 id="max-generations-negative"),
    pytest.param(["apply", "specs", "--lock-timeout", "-1"], "Invalid value",
                 id="lock-timeout-negative"),
    pytest.param(["apply", "specs", "--lock-timeout", "soon"], "Invalid value",
                 id="lock-timeout-word"),
    pytest.param(["apply", "specs", "--select"], "requires an argument", id="select-bare"),
    pytest.param(["apply", "specs", "--select", "team in evo"], "Invalid value",
                 id="select-bad-selector"),
    pytest.param(["apply", "specs", "--max-spend", "lots"], "Invalid value",
                 id="max-spend-word"),
    pytest.param(["apply", "specs", "--max-spend", "-1"], "Invalid value",
                 id="max-spend-negative"),
    pytest.param(["apply", "specs", "--deadline", "soon"], "Invalid value", id="deadline-word"),
    pytest.param(["plan", "specs", "--json", "--markdown"], "cannot be used together",
                 id="plan-json-and-markdown"),
    pytest.param(["plan", "specs", "-o"], "requires an argument", id="plan-out-bare"),
    pytest.param(["verify", "specs", "--timeout", "0"], "Invalid value", id="verify-timeout-0"),
    pytest.param(["validate", "specs", "--state-dir"], "requires an argument",
                 id="state-dir-bare"),
    pytest.param(["export", "x", "--format", "xlsx"], "'xlsx' is not one of csv, jsonl, json",
                 id="export-format-unknown"),
    pytest.param(["apply", "specs", "--executor", "foo"], "'foo' is not one of local, slurm",
                 id="apply-executor-unknown"),
    pytest.param(["doctor", "--executor", "foo"], "'foo' is not one of local, slurm",
                 id="doctor-executor-unknown"),
    pytest.param(["apply", "specs", "--executor", "slurm", "--deadline", "1m"],
                 "--deadline and --max-generations count this host's generations",
                 id="apply-slurm-with-deadline"),
    pytest.param(["apply", "specs", "--executor", "slurm", "--max-generations", "2"],
                 "leave them out", id="apply-slurm-with-max-generations"),
]


@pytest.mark.parametrize(("args", "message"), USAGE_ERRORS)
def test_usage_errors_exit_2_with_the_usage_message(args: list[str], message: str) -> None:
    done = ouro(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    if "requires an argument" not in message:  # typer prints that one without the usage line
        assert "Usage: ouro" in done.stderr, done.stderr
    assert message in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_bare_ouro_shows_help_not_an_error() -> None:
    done = ouro()
    assert done.returncode == 2  # click's rule for a group called without a command
    assert "Usage: ouro" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_has_a_short_flag(flag: str, command: str | None) -> None:
    done = ouro(*([command] if command else []), flag)
    assert done.returncode == 0, done.stderr
    assert f"Usage: ouro{' ' + command if command else ''}" in done.stdout


SUBCOMMANDS = [[c] for c in COMMANDS if c != "kernel"] + [
    ["kernel", str(c.name)] for c in kernel_app.registered_commands]


@pytest.mark.parametrize("command", [[], ["kernel"], *SUBCOMMANDS], ids=" ".join)
def test_help_at_80_columns_is_whole_and_has_no_type_placeholders(command: list[str]) -> None:
    """What a user reads at a normal terminal: no `<bool>` after a flag, no summary of a
    command cut with "...", every summary a whole sentence."""
    done = ouro(*command, "--help", env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "<bool>" not in text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    if "Commands:" in text:
        rows = [line for line in text.split("Commands:", 1)[1].splitlines() if line.strip()]
        assert rows, text
        for row in rows:
            assert row.startswith("  ") and row.rstrip().endswith("."), row
            assert not row.rstrip().endswith("..."), row


def test_version_names_the_version_commit_and_fingerprint() -> None:
    for flag in ("--version", "-V"):
        done = ouro(flag)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            f"ouro {__version__}",
            f"instrument commit: {os.environ['OURO_INSTRUMENT_COMMIT']}",
            f"kernel fingerprint: {identity.fingerprint()}",
        ]
        assert done.stderr == ""


def test_version_says_why_the_commit_is_unknown() -> None:
    env = {**os.environ, "OURO_INSTRUMENT_COMMIT": "not-a-commit"}
    done = ouro("--version", env=env)
    assert done.returncode == 0, done.stderr
    assert "instrument commit: unknown (ouro: OURO_INSTRUMENT_COMMIT='not-a-commit'" in (
        done.stdout)


def test_an_internal_error_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("apiVersion: ouro/v1\n")
    boom = ("import reconciler.spec.load as load\n"
            "def broken(*a, **k):\n    raise RuntimeError('the disk\\nis on fire')\n"
            "load.load_specs = broken\n" + MAIN.replace("; ", "\n"))
    done = ouro("validate", str(tmp_path), code=boom)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        "ouro: internal error (RuntimeError: the disk is on fire); this is a bug in ouro")
    assert "OURO_DEBUG=1" in done.stderr
    debug = ouro("validate", str(tmp_path), code=boom, env={**os.environ, "OURO_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_an_ouro_error_is_its_message_and_exit_1(tmp_path: Path) -> None:
    done = ouro("validate", str(tmp_path / "nowhere.yaml"))
    assert done.returncode == 1
    assert "nowhere.yaml" in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_shell_completion_completes_commands_and_options() -> None:
    env = {**os.environ, "_OURO_COMPLETE": "complete_bash", "COMP_WORDS": "ouro pl",
           "COMP_CWORD": "1"}
    done = subprocess.run([sys.executable, "-c", MAIN], env=env, capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.split() == ["plan"], done.stderr
    env.update(COMP_WORDS="ouro apply --par", COMP_CWORD="2")
    done = subprocess.run([sys.executable, "-c", MAIN], env=env, capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.stdout.split() == ["--parallel"], done.stderr


def test_show_completion_prints_a_script_for_the_shell() -> None:
    # from a real bash (not exec'd away): typer asks the process tree which shell it is
    done = subprocess.run(["bash", "-c", '"$0" -c "$1" --show-completion; exit $?',
                           sys.executable, MAIN], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "_OURO_COMPLETE=complete_bash" in done.stdout
    assert "--install-completion" in ouro("--help").stdout


def test_verify_help_states_the_engines_default_timeout() -> None:
    from reconciler.engine.verify import DEFAULT_TIMEOUT

    wide = {**os.environ, "COLUMNS": "300"}
    assert f"(default: {DEFAULT_TIMEOUT:g})" in ouro("verify", "-h", env=wide).stdout


def test_install_completion_writes_the_users_bash_completion(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run(["bash", "-c", '"$0" -c "$1" --install-completion; exit $?',
                           sys.executable, MAIN], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "ouro.sh"
    assert "_OURO_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
