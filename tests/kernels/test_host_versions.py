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


_WARMED = textwrap.dedent("""
    import json, sys
    from reconciler.engine import kernel_store_writer as writer
    from reconciler.kernel.broker import forker
    from reconciler.plan.kernel_choice import KernelChoice
    stored = KernelChoice(source="store", commit="c" * 40, fingerprint="f" * 64, reason=None,
                          message="")
    running = KernelChoice(source="running", commit="c" * 40, fingerprint="f" * 64, reason=None,
                           message="")
    choices = {"none": [], "stored": [stored], "running": [stored, running],
               "unresolved": [None]}[sys.argv[1]]
    writer.warm(choices)
    print(json.dumps({"versions": bool(writer._versions), "server": bool(forker._server)}))
""")


def test_an_apply_warms_what_its_lineages_will_wait_for() -> None:
    """After its plan, an apply starts the versions' read for any lineage to run, and the
    brokers' fork server only for one on this process's own kernel (a pinned kernel's
    process forks no broker from here)."""
    seen = {}
    for case in ("none", "stored", "running", "unresolved"):
        done = subprocess.run([sys.executable, "-c", _WARMED, case], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        seen[case] = json.loads(done.stdout)
    assert seen == {"none": {"versions": False, "server": False},
                    "stored": {"versions": True, "server": False},
                    "running": {"versions": True, "server": True},
                    "unresolved": {"versions": True, "server": True}}
