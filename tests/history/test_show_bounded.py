"""`ouro show` bounds the diff it prints (issue 36, item 10): a generation with a 100 MB
diff is shown within seconds and a 1 GiB address space, its first 2,000 lines and
256 KiB at most, then one line naming how to get the rest (`ouro diff`, `--full`)."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path

from reconciler.kernel.base import formats
from tests.apply.helpers import REPO_ROOT, ouro_argv
from tests.observe.builder import LineageBuilder

LIMIT = 1 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _text_file(index: int, size: int) -> bytes:
    line = f"file {index:03d}: ".encode() + b"x" * 90 + b"\n"
    return line * (size // len(line))


def test_a_100_mb_diff_is_shown_bounded(tmp_path: Path) -> None:
    state = tmp_path / "state"
    builder = LineageBuilder(state, "big")
    builder.gen("changed")
    builder._commit({f"data/{i:03d}.txt": _text_file(i, 1 << 20) for i in range(100)},
                    formats.EXTERNAL_EDIT_SUBJECT)  # 100 files of 1 MiB: a 100 MB diff
    builder.gen("changed")
    env = {**os.environ, "OURO_STATE_DIR": str(state)}
    started = time.monotonic()
    shown = subprocess.run(ouro_argv("show", "big", "2"), cwd=REPO_ROOT, env=env,
                           capture_output=True, timeout=60, preexec_fn=_limited)
    took = time.monotonic() - started
    assert shown.returncode == 0, shown.stderr[-2000:]
    out = shown.stdout.decode()
    assert len(shown.stdout) < 400 << 10, len(shown.stdout)
    assert took < 30, took
    [said] = [line for line in out.splitlines() if line.startswith("... (diff cut:")]
    assert "`ouro diff big 1 2`" in said and "--full" in said, said
    assert "of 102 files listed" in said, said  # the 100 files, organism.el and journal.md
    small = subprocess.run(ouro_argv("show", "big", "1"), cwd=REPO_ROOT, env=env,
                           capture_output=True, timeout=60)
    assert b"diff cut" not in small.stdout  # a small diff is whole, said nothing of
