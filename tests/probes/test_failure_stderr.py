"""A probe that fails says why in its own words (issue 41, item 3): its record keeps the
end of its stderr (4,096 characters, control characters but newline and tab replaced)
and ``outcome: failed`` (a failed probe is not one never measured), and ``ouro show``
prints the tail under the failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.state.probe_rules import STDERR_TAIL
from tests.apply.helpers import run_ouro, write_spec

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

# 10 KB of noise (with a terminal escape), then the words that say what went wrong
NOISY = ("i=0; while [ $i -lt 200 ]; do printf 'noise %03d \\033[31mred\\033[0m ....."
         "...............................\\n' $i >&2; i=$((i+1)); done; no-such-tool")


def _spec(specs: Path, name: str, script: str) -> None:
    path = write_spec(specs, name, 1)
    path.write_text(path.read_text() + (
        "  probes:\n"
        f"    - {{name: crash, run: [/bin/sh, -c, {json.dumps(script)}], "
        "ceilings: {wall: 20s, cpu: 5s}}\n"))


def test_a_failed_probe_records_and_shows_its_stderr(specs: Path, env: dict[str, str]) -> None:
    _spec(specs, "missing", NOISY)
    applied = run_ouro("apply", "--yes", str(specs), env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    shown = run_ouro("show", "missing", "1", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "probe crash failed: exit status 127" in shown.stdout, shown.stdout
    assert "no-such-tool: not found" in shown.stdout, shown.stdout
    assert "\x1b" not in shown.stdout
    [record] = json.loads(run_ouro("show", "missing", "1", "--json", env=env).stdout)["probes"]
    assert record["outcome"] == "failed" and record["metrics"] is None
    tail = record["stderr_tail"]
    assert len(tail) == STDERR_TAIL and tail.rstrip().endswith("no-such-tool: not found")
    assert "\x1b" not in tail and "\ufffd[31mred" in tail  # the escape made inert, kept
    assert not any(ord(c) < 32 and c not in "\n\t" for c in tail)


def test_a_measured_probe_says_so(specs: Path, env: dict[str, str]) -> None:
    _spec(specs, "fine", "echo '{\"n\": 1}'; echo 'a warning' >&2")
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    [record] = json.loads(run_ouro("show", "fine", "1", "--json", env=env).stdout)["probes"]
    assert (record["outcome"], record["metrics"]) == ("measured", {"n": 1})
    assert "a warning" not in run_ouro("show", "fine", "1", env=env).stdout  # only a failure's


def test_the_viewer_shows_a_failed_probes_stderr(specs: Path, env: dict[str, str]) -> None:
    """The lineage page lists the failure with the end of its stderr, escaped (issue 41
    item 3: show, the viewer and the export)."""
    from starlette.testclient import TestClient

    from reconciler.state.fleet import find_lineages
    from reconciler.viewer.app import FleetSource, Shown, create_app

    _spec(specs, "missing", NOISY.replace("; no-such-tool",
                                          "; echo '<b>bold</b>' >&2; no-such-tool"))
    assert run_ouro("apply", "--yes", str(specs), env=env).returncode == 0
    [found] = find_lineages(["missing"], [], Path(env["OURO_STATE_DIR"]))
    source = FleetSource(lambda: {"missing": Shown(found.paths, 1)}, fixed=True)
    client = TestClient(create_app(source, "t0ken"), base_url="http://127.0.0.1")
    page = client.get("/lineage/missing?token=t0ken").text
    assert "probe crash failed: exit status 127" in page
    assert '<pre class="probe-stderr"' in page and "no-such-tool: not found" in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page
    assert "\x1b" not in page
