"""What a fleet of hundreds needs of one apply process (issue 21): its descriptor limit
lifted, and no more lineages at once than that limit holds (physics release 3 lifted
the kernel's select(2) limit of 1,024; tests/kernel_broker/test_requests.py)."""

from __future__ import annotations

import resource
import subprocess
import sys

from reconciler.engine.apply import (
    FDS_PER_LINEAGE,
    FDS_RESERVED,
    lineages_at_once,
)


def test_lineages_at_once_keep_every_descriptor_within_the_open_files_limit() -> None:
    assert lineages_at_once(8, open_now=20, limit=1024) == 8
    room = (1024 - 20 - FDS_RESERVED) // FDS_PER_LINEAGE
    assert lineages_at_once(256, open_now=20, limit=1024) == room
    assert 20 + FDS_RESERVED + room * FDS_PER_LINEAGE <= 1024
    assert lineages_at_once(256, open_now=20, limit=20_000) == 256  # no select(2) cap left
    assert lineages_at_once(256, open_now=2000, limit=1024) == 1  # never none
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert lineages_at_once(256) <= max(1, (soft - FDS_RESERVED) // FDS_PER_LINEAGE)


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
