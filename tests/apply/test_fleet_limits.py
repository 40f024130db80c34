"""What a fleet of hundreds needs of one apply process (issue 21): its descriptor limit
lifted, and no more lineages at once than the kernel's select(2) can wait on."""

from __future__ import annotations

import resource
import subprocess
import sys

from reconciler.engine.apply import (
    FDS_PER_LINEAGE,
    FDS_RESERVED,
    SELECT_LIMIT,
    lineages_at_once,
)


def test_lineages_at_once_keep_every_descriptor_below_the_select_limit() -> None:
    assert lineages_at_once(8, open_now=20) == 8
    room = (SELECT_LIMIT - 20 - FDS_RESERVED) // FDS_PER_LINEAGE
    assert lineages_at_once(256, open_now=20) == room
    assert 20 + FDS_RESERVED + room * FDS_PER_LINEAGE < SELECT_LIMIT
    assert lineages_at_once(256, open_now=2000) == 1  # never none
    assert lineages_at_once(256) <= room  # this process's own count, read from /proc


def test_apply_lifts_its_soft_open_files_limit_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 256)
    code = ("import resource; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({low}, {hard})); "
            "from reconciler.engine.session import raise_open_files_limit; "
            "raise_open_files_limit(); print(*resource.getrlimit(resource.RLIMIT_NOFILE))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == [str(hard), str(hard)]
