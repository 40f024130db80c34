"""The versions every observation records (``ran_with.versions``) are read once per
process, on a thread of their own started before they are needed (``emacs --version``
is tens of milliseconds of an apply's start), and shared by every lineage's thread."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.conftest import REPO_ROOT

_SHARED = textwrap.dedent("""
    import json, sys, threading, time
    from reconciler.engine import kernel_store_writer as writer
    reads = []
    def slow():
        reads.append(threading.current_thread().name)
        time.sleep(0.2)
        if sys.argv[1] == "fails":
            raise OSError("no emacs")
        return {"emacs": "GNU Emacs 99", "python": "3"}
    writer._read_host_versions = slow
    writer.warm_host_versions()
    seen = []
    def ask():
        try:
            seen.append(writer.host_versions())
        except OSError as error:
            seen.append(str(error))
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if isinstance(seen[0], dict):
        seen[0]["emacs"] = "changed by one caller"  # a copy: the next caller's is intact
        seen.append(writer.host_versions())
    print(json.dumps({"reads": reads, "seen": seen}))
""")


def _run(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _SHARED, mode], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_versions_are_read_once_on_their_own_thread_and_shared() -> None:
    found = _run("reads")
    assert found["reads"] == ["ouro-host-versions"]
    seen = found["seen"]
    assert isinstance(seen, list) and len(seen) == 9
    assert seen[1:] == [{"emacs": "GNU Emacs 99", "python": "3"}] * 8


def test_a_failure_to_read_them_reaches_every_caller() -> None:
    found = _run("fails")
    assert found == {"reads": ["ouro-host-versions"], "seen": ["no emacs"] * 8}
