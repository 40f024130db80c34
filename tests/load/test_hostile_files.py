"""Files that would hang or exhaust ouro (what CI plans comes from pull requests):
refused with a clear message, within a memory ceiling, never a traceback.

Each CLI case runs ``main()`` in a real process under RLIMIT_AS, so a reader that
loaded the file's bytes (or expanded an alias bomb) would die of MemoryError (an
"internal error") instead of passing; the timeout is a hang guard, not a speed test.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.errors import PlanFileError
from reconciler.kernel.broker.providers import MAX_RESPONSE_BYTES, ProviderFailure, ReplayProvider
from reconciler.plan.saved import MAX_PLAN_BYTES, load_plan
from reconciler.spec.files import FileRefused, read_limited
from reconciler.spec.load import MAX_ALIAS_NODES, MAX_FILE_BYTES

ROOT = Path(__file__).resolve().parents[2]
MAIN = "import sys; from reconciler.cli import main; sys.argv[0] = 'ouro'; main()"
MEMORY_CEILING = 1 << 30  # address space: python + pydantic + pygit2 fit; a 1 GiB file does not
VALID = """\
apiVersion: ouro/v1
kind: Lineage
metadata: {name: fine}
spec: {generations: 1, model: {provider: echo}}
"""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CEILING, MEMORY_CEILING))


def ouro(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=cwd, env=dict(os.environ),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60, preexec_fn=_limit_memory)


def _refused(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def _merge_bomb(levels: int) -> str:
    lines = ["a0: &a0 {k0: 1, k1: 2}"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i}\n  <<: [*a{i - 1}, *a{i - 1}]\n  x{i}: 1")
    return "\n".join(lines) + "\n"


def _laughs(levels: int) -> str:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return (VALID.replace("metadata: {name: fine}", "metadata:\n  name: fine\n  labels:\n"
                          "    " + "\n    ".join(lines)))


# --- the bounded reader -------------------------------------------------------------


def test_read_limited_reads_up_to_the_limit_and_refuses_beyond(tmp_path: Path) -> None:
    exact = tmp_path / "exact"
    exact.write_bytes(b"x" * 100)
    assert read_limited(exact, 100, "a file") == b"x" * 100
    with pytest.raises(FileRefused, match=r"too large for a file \(100 bytes; at most 99\)"):
        read_limited(exact, 99, "a file")
    with pytest.raises(FileRefused, match="more than 1000 bytes"):
        read_limited(Path("/dev/zero"), 1000, "a file")
    with pytest.raises(FileRefused, match="is a folder"):
        read_limited(tmp_path, 1000, "a file")
    with pytest.raises(FileRefused, match="cannot read: No such file"):
        read_limited(tmp_path / "missing", 1000, "a file")


def test_read_limited_never_blocks_on_a_fifo_without_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert read_limited(fifo, 1000, "a file") == b""


def test_read_limited_reads_a_pipe_within_its_limit(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.write(write, b"apiVersion: ouro/v1\n")
    os.close(write)
    try:
        assert read_limited(Path(f"/proc/self/fd/{read}"), 1000, "a file") == (
            b"apiVersion: ouro/v1\n")
    finally:
        os.close(read)


# --- specs --------------------------------------------------------------------------


def test_validate_dev_zero_is_refused() -> None:
    _refused(ouro("validate", "/dev/zero"),
             f"/dev/zero:1:1: too large for a spec file (more than {MAX_FILE_BYTES} bytes)")


def test_validate_a_sparse_gigabyte_is_refused_by_its_size(tmp_path: Path) -> None:
    big = _sparse(tmp_path / "big.yaml", 1 << 30)
    _refused(ouro("validate", str(big)), f"{big}:1:1: too large for a spec file "
             f"({1 << 30} bytes; at most {MAX_FILE_BYTES})")


def test_a_folder_with_a_fifo_spec_does_not_hang(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(VALID)
    os.mkfifo(tmp_path / "pipe.yaml")
    _refused(ouro("validate", str(tmp_path / "pipe.yaml")),
             "pipe.yaml:1:1: empty: no spec document in this file")


@pytest.mark.parametrize("text", [
    pytest.param(_merge_bomb(30), id="chained-merge-keys"),
    pytest.param(_laughs(9), id="billion-laughs-in-labels"),
])
def test_alias_bombs_are_refused_with_file_and_line(tmp_path: Path, text: str) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(text)
    assert len(text) < 3000  # a small file
    done = ouro("validate", str(bomb))
    _refused(done, "aliases and merge keys (<<) expand this document to",
             f"more than {MAX_ALIAS_NODES} beyond the")
    assert done.stderr.startswith(f"{bomb}:"), done.stderr
    position = done.stderr.split(":")[1]
    assert position.isdigit() and int(position) >= 1


def test_an_alias_cycle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cycle.yaml"
    path.write_text(VALID.replace("metadata: {name: fine}",
                                  "metadata: {name: fine, labels: &l {a: *l}}"))
    _refused(ouro("validate", str(path)),
             f"{path}:3:", "an alias refers to a node that contains it (a cycle)")


def test_modest_aliases_and_merge_keys_still_load(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "apiVersion: ouro/v1\nkind: Lineage\n"
        "metadata: {name: one, labels: &team {team: evo}}\n"
        "spec:\n  generations: 1\n"
        "  model: {<<: &echo {provider: echo}, max_output_tokens: 100}\n"
        "---\napiVersion: ouro/v1\nkind: Lineage\n"
        "metadata: {name: two, labels: &t {team: evo}}\n"
        "spec: {generations: 2, model: {<<: [&e {provider: echo}], max_output_tokens: 9}}\n")
    done = ouro("validate", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok: 2 lineages in 1 file: one, two\n"


# --- saved plans --------------------------------------------------------------------


def _plan_file(path: Path, spec_file: str) -> Path:
    path.write_text(json.dumps({
        "format": "ouro-plan-file/v1", "created_at": "2026-01-01T00:00:00+00:00",
        "instrument": {"commit": "5" * 40, "fingerprint": "0" * 64},
        "lineages": [{"name": "fine", "action": "create", "reason": None,
                      "observed_generations": 0, "desired_generations": 1,
                      "missing_generations": 1, "max_spend_usd": "0",
                      "heads": {"lineage": None, "observation": None},
                      "branches": {"lineage": None, "observation": None},
                      "spec_sha256": "0" * 64, "spec_file": spec_file,
                      "spec_document_index": 0}],
    }))
    return path


def test_a_saved_plan_naming_dev_zero_as_its_spec_is_refused(tmp_path: Path) -> None:
    plan = _plan_file(tmp_path / "plan.json", "/dev/zero")
    _refused(ouro("apply", "--yes", str(plan)), "/dev/zero:1:1: too large for a spec file")


def test_a_saved_plan_naming_a_sparse_gigabyte_is_refused(tmp_path: Path) -> None:
    big = _sparse(tmp_path / "big.yaml", 1 << 30)
    plan = _plan_file(tmp_path / "plan.json", str(big))
    _refused(ouro("apply", "--yes", str(plan)), f"{big}:1:1: too large for a spec file")


def test_a_sparse_gigabyte_plan_file_is_refused(tmp_path: Path) -> None:
    plan = _sparse(tmp_path / "plan.json", 1 << 30)
    _refused(ouro("apply", "--yes", str(plan)),
             f"cannot read the plan file {plan}: too large for a plan file")
    with pytest.raises(PlanFileError, match=f"at most {MAX_PLAN_BYTES}"):
        load_plan(plan)


@pytest.mark.parametrize("opener,closer", [("[", "]"), ('{"a":', "}")], ids=["array", "object"])
def test_a_plan_nested_200000_deep_is_refused(tmp_path: Path, opener: str, closer: str) -> None:
    plan = tmp_path / "deep.json"
    plan.write_text(opener * 200_000 + ("1" if opener != "[" else "") + closer * 200_000)
    _refused(ouro("apply", "--yes", str(plan)), "nested too deeply to be a plan")
    with pytest.raises(PlanFileError, match="nested too deeply"):
        load_plan(plan)


# --- replies --------------------------------------------------------------------------


def test_a_reply_file_larger_than_a_response_is_refused_unread(tmp_path: Path) -> None:
    replies = tmp_path / "replies"
    replies.mkdir()
    _sparse(replies / "0001.el", 1 << 30)
    provider = ReplayProvider(replies, 0)
    with pytest.raises(ProviderFailure) as caught:
        provider.attempt("prompt", 100, 10.0)
    assert caught.value.reason == "replay_unreadable"
    assert f"{MAX_RESPONSE_BYTES}" in str(caught.value)


def test_a_reply_file_within_the_limit_is_the_reply(tmp_path: Path) -> None:
    replies = tmp_path / "replies"
    replies.mkdir()
    (replies / "0001.el").write_text('(message "hi")\n')
    assert ReplayProvider(replies, 0).attempt("prompt", 100, 10.0).text == '(message "hi")\n'
