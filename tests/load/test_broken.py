"""A folder of broken specs: one precise line per problem, and exit 1 from the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.errors import SpecError
from reconciler.spec.load import load_specs

BROKEN = Path(__file__).with_name("broken")

# file -> every problem line it must yield (FILE is relative to the broken folder).
EXPECTED: dict[str, list[str]] = {
    "duplicate-key.yaml": [
        "9:3: spec.generations: duplicate key (first at line 6, column 3)",
    ],
    "empty.yaml": ["1:1: empty: no spec document in this file"],
    "foreign.yaml": [
        "1:13: apiVersion: must be ouro/v1; this file says another value (a string)",
        "2:7: kind: must be Lineage or LineageSet; this file says another value (a string)",
    ],
    "list.yaml": [
        "1:1: a spec document is a mapping with apiVersion, kind, metadata and spec, not a list",
    ],
    "missing.yaml": [
        "3:11: metadata.name: required, but missing",
        "5:3: spec.generations: required, but missing",
        "6:5: spec.model.name: required, but missing: provider openai needs the model's name",
    ],
    "providers.yaml": [
        "10:15: spec.model.base_url: 'ftp://127.0.0.1:8080/v1' is not an http(s) URL with a "
        "host",
        "11:13: spec.model.replay: replay is only for provider replay, not anthropic: remove it",
        "20:5: spec.model.base_url: provider openai-compatible needs base_url, the server's API "
        "base, e.g. http://127.0.0.1:11434/v1 (Ollama) or http://127.0.0.1:8000/v1 (vLLM)",
        "20:5: spec.model.price: model 'llama3' has no known price for provider "
        'openai-compatible: set price: {input_usd_per_mtok: "...", output_usd_per_mtok: "..."} '
        "(known models: none: a server states its own)",
        "31:13: spec.model.replay: the replay folder '{broken}/no-such-folder' does not exist",
        "32:18: spec.model.api_key_env: provider replay uses no API key: remove api_key_env",
        "33:12: spec.model.price: provider replay costs nothing: remove price",
        "42:5: spec.model.price: model 'gpt-7' has no known price for provider openai: set "
        'price: {input_usd_per_mtok: "...", output_usd_per_mtok: "..."} '
        "(known models: gpt-5.4, gpt-5.4-mini, gpt-5.4-nano, gpt-5.5, gpt-5.6, gpt-5.6-luna, "
        "gpt-5.6-sol, gpt-5.6-terra)",
        "44:17: spec.model.budget_usd: budget_usd must be more than 0 for provider openai "
        "(it is the most a generation may spend)",
        "45:18: spec.model.api_key_env: provider openai needs an API key: name the environment "
        "variable that holds it (default OPENAI_API_KEY), or leave the field out",
    ],
    "syntax.yaml": [
        "5:5: YAML syntax error: while parsing a flow sequence; expected ',' or ']', but got ':'",
    ],
    "twin-b.yaml": [
        "5:9: metadata.name: lineage 'twin' is already defined at {shown}/twin-a.yaml:4:9; "
        "names must be unique",
    ],
    "typo.yaml": [
        "6:3: spec.generations: required, but missing",
        "6:3: spec.generatons: unknown field; did you mean 'generations'? "
        "(allowed here: generations, model, ceilings, storage, instrument, from, executor, "
        "probes, until, suspend)",
        "10:5: spec.ceilings.memroy: unknown field; did you mean 'memory'? (allowed here: wall, "
        "cpu, memory, swap, tasks, worktree, worktree_files, tmp, run, enforcement, "
        "model_requests, model_audit)",
    ],
    "values.yaml": [
        "4:9: metadata.name: 'Bad_Name' is not a valid lineage name: use 1-63 lowercase letters, "
        "digits and '-', not starting or ending with '-' (e.g. gpt-03)",
        "5:18: metadata.labels.team: must be a string, not integer 7: quote it",
        "7:16: spec.generations: must be at least 0, not integer -1",
        '11:17: spec.model.budget_usd: money must be a quoted decimal string, not a YAML float '
        '(floats are inexact): write "1.50" with the quotes',
        "12:22: spec.model.request_timeout: 'soon' is not a duration: write seconds (600) or "
        "600s, 10m, 1h, 1h30m",
        "15:10: spec.ceilings.cpu: cpu 5s is less than 1% of wall 10m: the quota cpu / wall "
        "must be at least 1%",
        "16:13: spec.ceilings.memory: '1GB' is ambiguous: write 1G or 1GiB (both powers of "
        "1024, as in systemd)",
        "17:10: spec.ceilings.tmp: must be at least 1, not integer 0",
        "18:18: spec.ceilings.enforcement: must be 'auto', 'systemd', 'cgroup2' or 'cgroup1', "
        "not string 'docker'",
        "20:13: spec.storage.branch: 'lineage..x' is not a valid git branch name: a branch name "
        "cannot contain '..'",
        "21:25: spec.storage.observation_branch: '-obs' is not a valid git branch name: a branch "
        "name cannot start with '-'",
        "23:13: spec.instrument.commit: 'abc123' is not a full 40- or 64-hex git commit id",
    ],
}


def _fill(line: str, shown: str) -> str:
    return line.replace("{shown}", shown).replace("{broken}", str(BROKEN))


def _expected_lines(shown: str) -> list[str]:
    return [
        f"{shown}/{name}:" + _fill(line, shown)
        for name, lines in sorted(EXPECTED.items())
        for line in lines
    ]


def test_every_broken_file_is_listed() -> None:
    on_disk = {p.name for p in BROKEN.iterdir() if p.suffix in (".yaml", ".yml")}
    assert on_disk == set(EXPECTED) | {"twin-a.yaml"}


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".yaml"))
def test_one_file_one_line_per_problem(name: str) -> None:
    paths = [BROKEN / name] if name != "twin-b.yaml" else [BROKEN / "twin-a.yaml", BROKEN / name]
    with pytest.raises(SpecError) as caught:
        load_specs(paths)
    shown = str(BROKEN)
    want = [f"{shown}/{name}:" + _fill(line, shown) for line in EXPECTED[name]]
    assert [str(p) for p in caught.value.problems] == want


def test_the_folder_reports_everything_at_once() -> None:
    with pytest.raises(SpecError) as caught:
        load_specs([BROKEN])
    assert [str(p) for p in caught.value.problems] == _expected_lines(str(BROKEN))


def test_cli_prints_every_line_on_stderr_and_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(BROKEN.parent)
    result = CliRunner().invoke(app, ["validate", "broken"])
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[:-1] == _expected_lines("broken")
    count = sum(len(v) for v in EXPECTED.values())
    assert lines[-1] == f"ouro validate: {count} problems in {len(EXPECTED)} files"
