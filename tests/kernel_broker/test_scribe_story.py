"""The offline default fleet's scripted lineage `scribe`, lived through with real Emacs.

specs/replies/scribe holds the replay provider's replies, one per successful
request, in name order. Played through the broker from the canonical seed with
a minimal kernel loop (outside any sandbox; deaths discard the life's writes
and restore the organism to its body before its last change, as the kernel does):

    gen 1  seed asks            -> 0001 installed (keeps /work/state.el)
    gen 2  0001: life 1         -> 0002 installed (rewrites its own prompt)
    gen 3  0002: life 2         -> 0003 installed (lethal)
    gen 4  0003 dies before asking; organism restored to 0002, state kept at life 2
    gen 5  0002: life 3         -> 0004 installed (recovers)
    gen 6  0004: life 4, replay exhausted -> no successor, still alive (beyond spec)
"""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.kernel.base.config import ModelConfig
from reconciler.kernel.base.formats import Status, journal_entry
from reconciler.kernel.broker.providers import replay_files
from reconciler.kernel.transaction.lineage import ORGANISM
from tests.kernel_broker.organism_harness import EMACS, defvar_value, elisp_string, live

REPLIES = Path(__file__).resolve().parents[2] / "specs" / "replies" / "scribe"


@pytest.mark.parametrize("reply", sorted(REPLIES.iterdir()), ids=lambda p: p.name)
def test_each_reply_is_a_complete_emacs_lisp_file(reply: Path) -> None:
    program = (
        f"(with-temp-buffer (insert-file-contents {elisp_string(str(reply))})"
        " (emacs-lisp-mode) (check-parens) (goto-char (point-min))"
        " (let ((forms 0)) (condition-case nil (while t (read (current-buffer))"
        " (setq forms (1+ forms))) (end-of-file (princ forms)))))"
    )
    result = subprocess.run([EMACS, "-Q", "--batch", "--eval", program], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 10
    text = reply.read_text(encoding="utf-8")
    assert text.startswith(";;; organism.el --- ") and text.endswith("\n")
    assert "(defvar organism-prompt" in text and "(organism-live)" in text


def test_replies_are_the_four_files_of_the_story() -> None:
    assert [p.name for p in replay_files(REPLIES)] == ["0001", "0002", "0003", "0004"]


def state_of(work: Path) -> str | None:
    path = work / "state.el"
    return path.read_text() if path.exists() else None


def test_the_story_holds_when_lived_through_the_broker(tmp_path: Path) -> None:
    model = ModelConfig(provider="replay", name="scribe-script", replay_dir=REPLIES)
    replies = {p.name: p.read_bytes() for p in replay_files(REPLIES)}
    tree: dict[str, bytes] = {"organism.el": ORGANISM.read_bytes()}
    bodies = [tree["organism.el"]]  # organism versions, in order of change
    journal = ""
    cursor = 0
    lives = []
    for generation in range(1, 7):
        work = tmp_path / f"g{generation}" / "work"
        work.mkdir(parents=True)
        for name, data in tree.items():
            (work / name).write_bytes(data)
        life = live(work=work, kernel=tmp_path / f"g{generation}" / "k",
                    private=tmp_path / f"g{generation}" / "p", model=model, journal=journal,
                    generation=generation, replay_cursor=cursor)
        cursor += sum(1 for call in life.report.model_calls if call["http_status"] == 200)
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        if life.exit_status == 0:
            after = {p.name: p.read_bytes() for p in work.iterdir()}
            status: Status = "changed" if after != tree else "no-change"
            tree = after
            if tree["organism.el"] != bodies[-1]:
                bodies.append(tree["organism.el"])
            journal += journal_entry(generation, status, stamp,
                                     detail="scripted" if status == "changed" else None)
        else:
            bodies.pop()  # the lethal body: back to the one before its change
            tree = {**tree, "organism.el": bodies[-1]}
            journal += journal_entry(generation, "died", stamp, exit_status=life.exit_status,
                                     stderr_lines=life.stderr.splitlines())
        lives.append((life, dict(tree)))

    statuses = [life.exit_status for life, _ in lives]
    assert statuses[:3] == [0, 0, 0] and statuses[3] != 0 and statuses[4:] == [0, 0]
    organisms = [tree["organism.el"] for _, tree in lives]
    assert organisms == [replies["0001"], replies["0002"], replies["0003"], replies["0002"],
                         replies["0004"], replies["0004"]]
    states = [tree.get("state.el") for _, tree in lives]
    assert states[0] is None  # the seed keeps no memory
    assert states[1] == b"(:lives 1)\n"
    assert states[2] == b'(:lives 2 :voice "first person")\n'
    assert states[3] == states[2]  # the death's writes are discarded
    assert states[4] == b'(:lives 3 :voice "first person")\n'
    assert states[5] == b'(:lives 4 :voice "first person" :deaths-seen 1)\n'

    calls = [life.report.model_calls for life, _ in lives]
    assert [[c["http_status"] for c in gen] for gen in calls] == \
        [[200], [200], [200], [], [200], [502]]
    assert [gen[0]["response"].encode() for gen in calls if gen and gen[0]["response"]] == \
        [replies["0001"], replies["0002"], replies["0003"], replies["0004"]]
    assert "replay exhausted" in calls[5][0]["error_detail"]
    assert all(c["accounted_usd"] == "0" for gen in calls for c in gen)

    # 0002 rewrote its own prompt: gen 3's (and gen 5's) request opens with the new voice
    voice = defvar_value(REPLIES / "0002", "organism-prompt")
    assert voice.startswith("I am scribe")
    assert calls[2][0]["prompt"].startswith(voice) and calls[4][0]["prompt"].startswith(voice)
    assert calls[1][0]["prompt"].startswith(defvar_value(REPLIES / "0001", "organism-prompt"))
    # the death is in the journal the next life reads, with the error's last lines
    assert "scribe-consolidate-memory" in lives[3][0].stderr
    assert "## gen 4 — died" in calls[4][0]["prompt"]


def test_the_lethal_reply_dies_before_it_spends_anything(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copyfile(REPLIES / "0003", work / "organism.el")
    model = ModelConfig(provider="replay", name="scribe-script", replay_dir=REPLIES)
    life = live(work=work, kernel=tmp_path / "k", private=tmp_path / "p", model=model)
    assert life.exit_status == 255
    assert "void" in life.stderr and life.report.model_calls == []
