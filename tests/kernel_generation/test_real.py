"""Real generations: bwrap, cgroup1 ceilings, the model broker with the replay provider,
Emacs. The DONE criteria of the kernel's second half."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import Ceilings, ModelConfig, constraints_manifest
from reconciler.kernel.transaction.generation import GenerationOutcome, run_generation
from tests.host import require
from tests.kernel_generation.helpers import (
    REAL_CEILINGS,
    Lineage,
    git,
    needs_real_host,
    replay_model,
    seed_text,
    subjects,
)

pytestmark = [needs_real_host, pytest.mark.sandbox, pytest.mark.cgroup, pytest.mark.slow]
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


def generate(born: Lineage, model: ModelConfig, ceilings: Ceilings = REAL_CEILINGS
             ) -> GenerationOutcome:
    return run_generation(paths=born.paths, identity=born.identity, model=model,
                          ceilings=ceilings, api_key=None)


def numstat(born: Lineage, commit: str) -> tuple[int, int]:
    line = git(born.worktree, "diff", "--numstat", f"{commit}~1", commit, "--", "organism.el")
    added, deleted, _ = line.split("\t")
    return int(added), int(deleted)


def test_five_scripted_generations(born: Lineage, tmp_path: Path) -> None:
    seed = seed_text()
    one = seed + ";; generation one\n"
    lethal = '(message "lethal body")\n(kill-emacs 7)\n'
    five = one + ";; generation five\n"
    model = replay_model(tmp_path / "replies", [one, lethal, one, five])

    outcomes = [generate(born, model) for _ in range(5)]

    assert [o.status for o in outcomes] == ["changed", "changed", "died", "no-change", "changed"]
    commits = [o.lineage_commit for o in outcomes]
    a1, d1 = numstat(born, commits[0])
    a2, d2 = numstat(born, commits[1])
    assert (a1, d1) == (1, 0)
    assert (a2, d2) == (2, len(one.splitlines()))
    assert subjects(born.worktree) == [
        "seed",
        "gen 1: changed (organism +1/-0; 1 paths)",
        f"gen 2: changed (organism +{a2}/-{d2}; 1 paths)",
        "gen 3: died (exit 7); staged writes discarded",
        "gen 4: no-change",
        "gen 5: changed (organism +1/-0; 1 paths)",
    ]
    assert git(born.worktree, "rev-list", "--first-parent", "HEAD").split()[::-1][1:] == commits
    bodies = [git(born.worktree, "show", f"{c}:organism.el") for c in commits]
    assert bodies == [one, lethal, one, one, five]  # the death restored the body before it
    assert born.organism() == five
    assert git(born.worktree, "status", "--porcelain", "--ignored") == ""
    assert git(born.worktree, "log", "--format=%an <%ae>|%cn <%ce>").splitlines() == (
        ["ouroboros <ouroboros@localhost>|ouroboros <ouroboros@localhost>"] * 6)

    journal = born.journal()
    expected = (
        rf"\n## gen 1 — changed — organism \+1/-0; 1 paths — {STAMP}\n"
        rf"\n## gen 2 — changed — organism \+{a2}/-{d2}; 1 paths — {STAMP}\n"
        rf"\n## gen 3 — died — {STAMP}\nexit 7\n~~~\nlethal body\n~~~\n"
        rf"\n## gen 4 — no-change — {STAMP}\n"
        rf"\n## gen 5 — changed — organism \+1/-0; 1 paths — {STAMP}\n"
    )
    assert re.fullmatch(expected, journal), journal
    assert [(h.number, h.status) for h in formats.parse_journal(journal)] == [
        (1, "changed"), (2, "changed"), (3, "died"), (4, "no-change"), (5, "changed")]

    assert git(born.observations, "log", "--format=%s").splitlines()[::-1] == [
        "observe: initialize lineage-test",
        "observe: gen 1 changed — organism +1/-0; 1 paths",
        f"observe: gen 2 changed — organism +{a2}/-{d2}; 1 paths",
        "observe: gen 3 process_exit",
        "observe: gen 4 no-change",
        "observe: gen 5 changed — organism +1/-0; 1 paths",
    ]
    constraints = constraints_manifest(REAL_CEILINGS, model)
    calls_per_generation = [1, 1, 0, 1, 1]
    for number, (outcome, calls) in enumerate(zip(outcomes, calls_per_generation, strict=True),
                                              start=1):
        record = born.observation(number)
        assert record["schema"] == "ouroboros-generation-observation/v1"
        assert record["generation"] == number
        assert re.fullmatch(STAMP, record["started_at"])
        assert isinstance(record["duration_ms"], int) and record["duration_ms"] > 0
        assert record["outcome"] == outcome.outcome
        assert formats.status_of_outcome(record["outcome"]) == outcome.status
        assert record["lineage_commit"] == outcome.lineage_commit
        assert record["provider"] == "replay" and record["model"] == "replay-test"
        assert record["constraints"] == constraints
        assert record["ceiling_backend"] == "cgroup1"
        assert isinstance(record["cpu_usage_nsec"], int) and record["cpu_usage_nsec"] > 0
        assert isinstance(record["memory_peak_bytes"], int) and record["memory_peak_bytes"] > 0
        assert record["oom_kills"] == 0
        assert len(record["model_calls"]) == calls
        assert all(c["http_status"] == 200 and c["schema"] == "ouroboros-model-call/v1"
                   for c in record["model_calls"])
        if outcome.status == "died":
            assert (record["exit_status"], record["stderr_tail"]) == (7, "lethal body")
            assert record["published_files"] is None and record["published_bytes"] is None
            assert record["result_archive_bytes"] == 0
        else:
            body = bodies[number - 1].encode()
            assert record["exit_status"] == 0
            assert (record["published_files"], record["published_bytes"]) == (1, len(body))
            assert record["result_archive_bytes"] > len(body)
    # the responses the organisms got were the scripted ones, in order (cursor right)
    responses = [c["response"] for n in range(1, 6) for c in born.observation(n)["model_calls"]]
    assert responses == [one, lethal, one, five]
    # ouro's own readers agree: the full-history audit and the observer
    from reconciler.state.audit import audit_lineage
    from reconciler.state.observe import observe

    audit = audit_lineage(born.paths)
    assert (audit.status, audit.generations, audit.observations, audit.findings) == (
        "consistent", 5, 5, ())
    observed = observe(born.paths)
    assert (observed.generations, observed.observed_generations, observed.problems,
            observed.interrupted, observed.dirty) == (5, 5, (), None, False)


def test_a_ceiling_that_cannot_be_enforced_is_a_preflight_error(
    born: Lineage, quiet: ModelConfig
) -> None:
    from reconciler.kernel.base.errors import CeilingError
    from reconciler.kernel.sandbox.ceilings import open_scope

    unavailable = None
    for backend in ("systemd", "cgroup2"):
        try:
            open_scope(Ceilings(enforcement=backend), f"probe.{backend}").close()
        except CeilingError:
            unavailable = backend
            break
    require(unavailable is not None, "needs a ceiling backend that does not work here")
    (born.worktree / "edit.txt").write_text("uncommitted\n")
    with pytest.raises(CeilingError, match="resource scope"):
        generate(born, quiet, dataclasses.replace(REAL_CEILINGS, enforcement=unavailable))
    assert subjects(born.worktree) == ["seed"]
    assert git(born.observations, "log", "--format=%s").splitlines() == [
        "observe: initialize lineage-test"]


def install(born: Lineage, body: str) -> None:
    """An external edit installs the organism under test."""
    (born.worktree / "organism.el").write_text(body)


@pytest.fixture
def quiet(tmp_path: Path) -> ModelConfig:
    return replay_model(tmp_path / "replies", [])


def test_memory_hog_ends_as_cgroup_oom(born: Lineage, quiet: ModelConfig) -> None:
    install(born, "(setq s (make-string (* 512 1024 1024) ?x))\n")
    ceilings = dataclasses.replace(REAL_CEILINGS, memory_bytes=128 << 20)
    outcome = generate(born, quiet, ceilings)
    assert (outcome.status, outcome.outcome) == ("died", "cgroup_oom")
    record = born.observation(1)
    assert record["oom_kills"] >= 1
    assert record["exit_status"] == 137
    assert subjects(born.worktree)[-1] == "gen 1: died (exit 137); staged writes discarded"


def test_fork_bomb_is_held_by_the_task_ceiling(born: Lineage, quiet: ModelConfig) -> None:
    install(born, """(let ((n 0))
  (condition-case nil
      (dotimes (_ 200)
        (make-process :name "s" :command '("sleep" "30") :connection-type 'pipe)
        (setq n (1+ n)))
    (error nil))
  (message "started %d" n)
  (kill-emacs 1))
""")
    ceilings = dataclasses.replace(REAL_CEILINGS, tasks=16)
    outcome = generate(born, quiet, ceilings)
    assert outcome.outcome == "process_exit"
    started = int(re.search(r"started (\d+)", born.journal()).group(1))  # type: ignore[union-attr]
    assert 0 < started < 16


def test_shell_fork_bomb_ends_at_the_wall(born: Lineage, quiet: ModelConfig) -> None:
    install(born, '(call-process "sh" nil 0 nil "-c" "b(){ b | b & }; b")\n'
                  "(while t (sleep-for 1))\n")
    ceilings = dataclasses.replace(REAL_CEILINGS, tasks=32, wall_seconds=4, cpu_seconds=4)
    began = time.monotonic()
    outcome = generate(born, quiet, ceilings)
    assert outcome.outcome == "wall_timeout"
    assert time.monotonic() - began < 20


def test_busy_loop_is_ended_by_the_wall_limit(born: Lineage, quiet: ModelConfig) -> None:
    install(born, "(while t)\n")
    ceilings = dataclasses.replace(REAL_CEILINGS, wall_seconds=3, cpu_seconds=3)
    began = time.monotonic()
    outcome = generate(born, quiet, ceilings)
    assert (outcome.status, outcome.outcome) == ("died", "wall_timeout")
    assert 3 <= time.monotonic() - began < 15
    assert born.observation(1)["outcome"] == "wall_timeout"


def test_gitignore_cannot_hide_files(born: Lineage, quiet: ModelConfig) -> None:
    install(born, """(write-region "hidden.txt\\n" nil "/work/.gitignore")
(write-region "still hereditary\\n" nil "/work/hidden.txt")
""")
    outcome = generate(born, quiet)
    assert outcome.outcome == "changed — organism unchanged; 2 other paths"
    tracked = git(born.worktree, "ls-files").splitlines()
    assert {".gitignore", "hidden.txt"} <= set(tracked)
    assert (born.worktree / "hidden.txt").read_text() == "still hereditary\n"


def test_death_journal_keeps_exactly_the_last_five_lines(born: Lineage,
                                                        quiet: ModelConfig) -> None:
    install(born, """(message "Error: wrong-type-argument (stringp nil)")
(dotimes (i 12) (message "  frame-%d()" i))
(write-region "x" nil "/work/unpublished.txt")
(kill-emacs 255)
""")
    outcome = generate(born, quiet)
    assert (outcome.outcome, outcome.exit_status) == ("process_exit", 255)
    journal = born.journal()
    tail = "".join(f"  frame-{i}()\n" for i in range(7, 12))
    assert journal.endswith(f"exit 255\n~~~\n{tail}~~~\n")
    assert "frame-6()" not in journal and "wrong-type-argument" not in journal
    assert "wrong-type-argument" in born.observation(1)["stderr_tail"]
    assert not (born.worktree / "unpublished.txt").exists()


def test_an_emacs_backtrace_keeps_its_lisp_error_line_and_five_frames(
        born: Lineage, quiet: ModelConfig) -> None:
    """A Lisp error's backtrace ends in a blank line: it takes none of the five places.
    Its first line, the cause, is kept before them (physics release 2: the original cut
    it off, so no later life learned why its ancestor died)."""
    install(born, "(defun deep (n) (if (> n 0) (deep (1- n)) (undefined-function-of-the-organism)))"
                  "\n(deep 8)\n")
    outcome = generate(born, quiet)
    assert outcome.outcome == "process_exit"
    entry = born.journal().rsplit("~~~\n", 2)[-2]  # the fenced stderr block
    lines = entry.split("\n")[:-1]
    assert len(lines) == 6 and all(lines), lines
    assert lines[0] == ("Debugger entered--Lisp error: "
                        "(void-function undefined-function-of-the-organism)")
    assert (lines[1], lines[-1]) == ("  deep(8)", "  normal-top-level()")  # the last five
    assert [h.status for h in formats.parse_journal(born.journal())] == ["died"]


def test_no_change_has_no_zero_zero(born: Lineage, tmp_path: Path) -> None:
    model = replay_model(tmp_path / "replies", [seed_text()])
    outcome = generate(born, model)
    assert outcome.outcome == "no-change"
    assert "gen 1 — no-change — " in born.journal() and "+0/-0" not in born.journal()


def test_exit_zero_with_hostile_archive_is_a_decoder_death(born: Lineage,
                                                          quiet: ModelConfig) -> None:
    install(born, """(make-directory "/work/sub/.git" t)
(write-region "[core]\\n" nil "/work/sub/.git/config")
""")
    outcome = generate(born, quiet)
    assert (outcome.status, outcome.outcome, outcome.exit_status) == (
        "died", "decoder_rejection", 0)
    assert subjects(born.worktree)[-1] == "gen 1: died (exit 0); staged writes discarded"
    assert not (born.worktree / "sub").exists()
    record = born.observation(1)
    assert ".git" in record["rejection"]["message"]
    assert record["result_archive_bytes"] > 0


def test_broker_failing_after_the_sandbox_started_discards_the_attempt(
    born: Lineage, quiet: ModelConfig
) -> None:
    from reconciler.kernel.base.errors import TransientError
    from reconciler.kernel.transaction.generation import real_runtime

    install(born, '(write-region "x" nil "/work/started")\n(sleep-for 30)\n')

    def broken_broker(**kwargs: object) -> object:
        time.sleep(1.0)  # the organism is already running
        raise TransientError("kernel: the model broker did not start: test")

    runtime = dataclasses.replace(real_runtime(), start_broker=broken_broker)
    began = time.monotonic()
    with pytest.raises(TransientError, match="did not start"):
        run_generation(paths=born.paths, identity=born.identity, model=quiet,
                       ceilings=REAL_CEILINGS, api_key=None, runtime=runtime)
    assert time.monotonic() - began < 15  # the sandbox was stopped, not waited out
    assert subjects(born.worktree) == ["seed", "external edit"]
    assert git(born.observations, "log", "-1", "--format=%s").strip() == (
        "observe: interrupted gen 1 (discarded)")
    assert git(born.worktree, "status", "--porcelain", "--ignored") == ""


def test_organism_flooding_the_model_socket_cannot_hold_the_kernel(
    born: Lineage, tmp_path: Path
) -> None:
    model = replay_model(tmp_path / "replies", ["(kill-emacs 0)\n"])
    install(born, """(dotimes (i 200)
  (ignore-errors
    (make-network-process :name (format "c%d" i) :family 'local
                          :service "/kernel/model.sock" :nowait nil)))
(with-temp-buffer
  (call-process "curl" nil t nil "-sS" "--max-time" "20" "--unix-socket" "/kernel/model.sock"
                "-X" "POST" "-H" "X-Ouroboros-Max-Output-Tokens: 10"
                "--data-binary" "hello" "http://kernel/generate")
  (write-region (point-min) (point-max) "/work/reply.txt"))
""")
    began = time.monotonic()
    outcome = generate(born, model, dataclasses.replace(REAL_CEILINGS, wall_seconds=6,
                                                         cpu_seconds=6))
    # Its idle connections only starve its own request (the broker serves one at a time,
    # as without the kernel's door): whatever the life makes of that, the kernel is not
    # held past the wall and the generation is recorded.
    assert time.monotonic() - began < 20
    assert born.observation(1)["lineage_commit"] == outcome.lineage_commit
