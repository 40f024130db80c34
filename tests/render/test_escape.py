"""Text a spec or a path controls is escaped for where it goes: Markdown (a plan posted as a
pull-request comment, rendered as GitHub does: CommonMark, tables, raw HTML) and the
terminal (plan, status, apply's progress and summary, validate, errors)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from reconciler.kernel.base.config import LineagePaths
from reconciler.report.escape import markdown, markdown_code, terminal
from reconciler.state import instrument
from tests.inprocess import ouro
from tests.observe.builder import LineageBuilder

# Every control a terminal acts on: ESC (CSI, OSC: a title, a hyperlink), BEL, CR (overwrite
# the line), backspace, the 8-bit CSI (U+009B), and a right-to-left override.
CONTROLS = "\x1b[2J\x1b]0;owned\x07\r\x08\x9b31m\u202e"
_RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(autouse=True)
def _openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-escape")
    monkeypatch.setenv("NO_COLOR", "1")


def _spec(name: str, paths: LineagePaths, *, generations: int = 2, budget: str = "1.00",
          model: str = "gpt-5.6") -> str:
    def quoted(path: Path) -> str:
        return json.dumps(str(path))  # a JSON string is a YAML double-quoted scalar

    return (f"apiVersion: ouro/v1\nkind: Lineage\nmetadata:\n  name: {name}\nspec:\n"
            f"  generations: {generations}\n  model:\n    provider: openai\n"
            f"    name: {json.dumps(model)}\n    budget_usd: \"{budget}\"\n"
            "    price: {input_usd_per_mtok: \"5.00\", output_usd_per_mtok: \"30.00\"}\n"
            "  storage:\n"
            f"    path: {quoted(paths.worktree)}\n    git_dir: {quoted(paths.git_dir)}\n"
            f"    observations: {quoted(paths.observations)}\n")


def _places(root: Path, name: str) -> LineagePaths:
    return LineagePaths(worktree=root / name, git_dir=root / f"{name}.git",
                        observations=root / f"{name}.observations",
                        branch=f"lineage-{name}", observation_branch=f"observations/lineage-{name}")


def _strings(value: object) -> list[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _github(text: str) -> str:
    """HTML as a pull-request comment renders: CommonMark with tables and raw HTML."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(text)


def test_a_path_holding_a_comment_hides_no_row_of_a_markdown_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The attacker's spec: a refused lineage whose place holds a line break and `<!--` (the
    # refusal names it; refusals are listed first: an HTML block opens), a creation of up
    # to $50,000 the reviewer must see, then an extension whose model change holds the
    # `-->` that ends the block.
    hostile = _places(tmp_path / "a\r<!--b", "decoy")
    hostile.worktree.mkdir(parents=True)  # only the worktree: refused, partial-paths
    costly = _places(tmp_path, "costly")
    tail = LineageBuilder(tmp_path, "tail", identity=instrument.current())
    tail.gen()
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "fleet.yaml").write_text(
        _spec("decoy", hostile) + "---\n"
        + _spec("costly", costly, generations=50, budget="1000.00") + "---\n"
        + _spec("tail", tail.paths, model="gpt-5.6-->"), encoding="utf-8")
    code, out, err = ouro(monkeypatch, capsys, "plan", specs, "--markdown")
    assert code == 1 and out, err
    html = _github(out)
    assert "<!--" not in html  # no comment opens: nothing after it is hidden
    assert "<code>costly</code>" in html and "$50000.00" in html
    assert "gpt-5.6--&gt;" in html
    assert "a\\x0d&lt;!--b" in html  # the path is shown, as the text it is


def test_markdown_escapes_html_links_emphasis_and_cells() -> None:
    hostile = "<script>x</script> [a](javascript:y) *b* _e_ | c\n<!-- `d` OPENAI_API_KEY"
    html = _github(f"| h |\n|---|\n| {markdown(hostile)} |\n")
    assert "<script>" not in html and "<a " not in html and "<em>" not in html
    assert "<!--" not in html and html.count("<td>") == 1
    assert "*b* _e_ | c &lt;!-- `d` OPENAI_API_KEY" in html  # every character, one line
    assert markdown_code("costly") == "`costly`"
    assert "<code>" not in _github(markdown_code("a`b|c"))


def test_terminal_controls_in_spec_paths_reach_no_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = _places(tmp_path / f"p{CONTROLS}q", "loud")
    hostile.worktree.mkdir(parents=True)  # partial-paths: plan, apply and status name it
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "fleet.yaml").write_text(_spec("loud", hostile), encoding="utf-8")
    shown = terminal(str(hostile.git_dir))
    assert "\\x1b[2J" in shown and "\\x9b" in shown and "\\u202e" in shown
    outputs = []
    for args in (("plan", specs), ("status", specs), ("apply", "--yes", specs),
                 ("validate", specs), ("plan", "--json", specs), ("status", "--json", specs),
                 ("apply", "--yes", "--json", specs)):
        code, out, err = ouro(monkeypatch, capsys, *args)
        outputs.append((" ".join(str(a) for a in args if a != specs), code, out + err))
    for command, _code, text in outputs:
        assert not _RAW_CONTROL.search(text), (command, _RAW_CONTROL.findall(text), text[:80])
    by_command = {command: text for command, _, text in outputs}
    for command in ("plan", "status", "apply --yes"):
        assert shown in by_command[command], (command, by_command[command])
    document = json.loads(by_command["plan --json"])  # the same document, only escaped
    assert any(str(hostile.git_dir) in text for text in _strings(document))
    # an error message (a spec problem) is escaped too
    (specs / "fleet.yaml").write_text(_spec("loud", hostile).replace("gpt-5.6", "[bold]"),
                                      encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"apiVersion: ouro/v1\nkind: {json.dumps(CONTROLS)}\n", encoding="utf-8")
    code, out, err = ouro(monkeypatch, capsys, "plan", bad)
    assert code == 1 and not _RAW_CONTROL.search(out + err), err


def test_what_an_organism_and_a_model_wrote_reaches_no_terminal_in_log_show_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An organism that writes control sequences into its files and stderr, a model whose
    # reply holds them: log, show and diff print all of it, escaped.
    state = tmp_path / "state"
    loud = LineageBuilder(state, "loud", identity=instrument.current())
    loud.gen("changed")
    loud._commit({f"notes{CONTROLS}.txt": f"hello {CONTROLS}\n".encode()},
                 "external edit")
    loud.gen("died", stderr_tail=[f"boom {CONTROLS}"],
             calls=[{"http_status": 200, "response": f"reply {CONTROLS}",
                     "prompt": f"prompt {CONTROLS}"}])
    monkeypatch.setenv("OURO_STATE_DIR", str(state))
    outputs = {}
    for args in (("log", "loud"), ("show", "loud", "2"), ("show", "loud", "2", "--full"),
                 ("diff", "loud", "1", "2"), ("log", "--json", "loud"),
                 ("show", "--json", "loud", "2"), ("export", "--format", "jsonl", "loud")):
        code, out, err = ouro(monkeypatch, capsys, *args)
        assert code == 0, err
        outputs[" ".join(args)] = out + err
    for command, text in outputs.items():
        assert not _RAW_CONTROL.search(text), (command, _RAW_CONTROL.findall(text), text[:80])
    assert "\\x1b[2J" in outputs["show loud 2"] and "\\u202e" in outputs["diff loud 1 2"]
    shown = json.loads(outputs["show --json loud 2"])  # the same document, only escaped
    assert any(f"boom {CONTROLS}" in text for text in _strings(shown))
