"""The canonical seed, run by real Emacs (outside a sandbox) against a real broker.

Done criterion of the broker: the seed asks the replay provider for its
successor with the prompt it defines, installs a non-empty reply byte for byte,
and leaves itself alone (exit 0) on an empty reply or any error; the audit and
the ledger say exactly what happened.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.kernel.base.config import Ceilings, ModelConfig, Price, constraints_manifest
from reconciler.kernel.broker.door import capabilities
from reconciler.kernel.transaction.lineage import ORGANISM
from tests.kernel_broker.organism_harness import (
    EMACS,
    Life,
    defvar_value,
    elisp_string,
    live,
)

JOURNAL = "\n## gen 1 — no-change — 2026-11-29T15:45:59+00:00\n"
REPLY = ';;; next — généré 🐍\n(message "the successor")\n'


@dataclass(frozen=True)
class Places:
    work: Path
    kernel: Path
    private: Path

    def live(self, model: ModelConfig, **kwargs: Any) -> Life:
        return live(work=self.work, kernel=self.kernel, private=self.private, model=model,
                    **kwargs)


@pytest.fixture
def places(tmp_path: Path) -> Places:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copyfile(ORGANISM, work / "organism.el")
    return Places(work, tmp_path / "k", tmp_path / "p")


def replay(tmp_path: Path, *replies: str, **overrides: object) -> ModelConfig:
    folder = tmp_path / "replies"
    folder.mkdir(exist_ok=True)
    for number, text in enumerate(replies, start=1):
        (folder / f"{number:04d}").write_bytes(text.encode("utf-8"))
    return ModelConfig(provider="replay", name="scripted", replay_dir=folder,
                       **overrides)  # type: ignore[arg-type]


def test_seed_asks_the_replay_model_and_becomes_its_reply(
        tmp_path: Path, places: Places) -> None:
    model = replay(tmp_path, REPLY)
    life = places.live(model, journal=JOURNAL, generation=2)
    assert life.exit_status == 0, life.stderr
    assert (places.work / "organism.el").read_bytes() == REPLY.encode("utf-8")
    assert sorted(p.name for p in places.work.iterdir()) == ["organism.el"]

    (call,) = life.report.model_calls
    seed = ORGANISM.read_text(encoding="utf-8")
    expected_prompt = (
        defvar_value(ORGANISM, "organism-prompt")
        + "\n\n----- capabilities.json -----\n" + life.manifest
        + "\n----- journal.md -----\n" + JOURNAL
        + "\n----- organism.el (current source) -----\n" + seed
    )
    assert call["prompt"] == expected_prompt
    assert call["prompt_bytes"] == len(expected_prompt.encode("utf-8"))
    assert call["prompt_sha256"] == hashlib.sha256(expected_prompt.encode()).hexdigest()
    assert call["requested_output_tokens"] == call["granted_output_tokens"] == 12000
    assert (call["http_status"], call["error"], call["generation"]) == (200, None, 2)
    assert call["response"] == REPLY
    assert call["response_bytes"] == len(REPLY.encode("utf-8"))
    assert call["response_sha256"] == hashlib.sha256(REPLY.encode()).hexdigest()
    assert call["usage"] is None and call["accounted_usd"] == "0"
    assert life.report.accounted_usd == 0


def test_a_life_of_the_seed_loads_no_library(tmp_path: Path, places: Places) -> None:
    """Each library a life loads is paid for in every life (`json', `seq' and `subr-x'
    were ~20 ms of a generation's ~100): the seed asks, installs and notes with what Emacs
    has as it starts, so a whole life (its model call included) leaves `features' as
    `emacs -Q --batch' starts with."""
    found = tmp_path / "features.eld"
    dump = f"(with-temp-file {elisp_string(str(found))} (prin1 features (current-buffer)))"
    life = places.live(replay(tmp_path, REPLY), then=dump)
    assert life.exit_status == 0, life.stderr
    assert (places.work / "organism.el").read_bytes() == REPLY.encode("utf-8")  # it lived
    started = subprocess.run([EMACS, "-Q", "--batch", "--eval", "(prin1 features)"],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    assert found.read_text().split() == started.split()


def test_the_prompt_variable_is_what_is_sent(tmp_path: Path, places: Places) -> None:
    source = places.work / "organism.el"
    text = source.read_text()
    start = text.index('(defvar organism-prompt\n  "') + len('(defvar organism-prompt\n  "')
    source.write_text(text[:start] + "REWRITTEN INSTRUCTION. " + text[start:])
    life = places.live(replay(tmp_path, REPLY))
    assert life.exit_status == 0, life.stderr
    assert life.report.model_calls[0]["prompt"].startswith("REWRITTEN INSTRUCTION. ")


NO_SUCCESSOR = [
    pytest.param("echo", {}, 200, id="echo-empty-reply"),
    pytest.param("exhausted", {}, 502, id="replay-exhausted"),
    pytest.param("budget", {"price": Price(Decimal(5), Decimal(30)),
                            "budget_usd": Decimal("0.01")}, 402, id="budget-exhausted"),
    pytest.param("prompt-too-large", {"max_prompt_bytes": 2000}, 400, id="prompt-too-large"),
    pytest.param("no-broker", {}, None, id="no-broker-listening"),
]


@pytest.mark.parametrize(("kind", "overrides", "status"), NO_SUCCESSOR)
def test_no_successor_leaves_the_seed_and_exits_zero(
        tmp_path: Path, places: Places, kind: str, overrides: dict[str, object],
        status: int | None) -> None:
    if kind == "echo":
        model = ModelConfig(provider="echo", name="echo")
    else:
        model = replay(tmp_path, *([] if kind == "exhausted" else [REPLY]), **overrides)
    if kind == "no-broker":  # a manifest naming a socket nobody listens on
        places.kernel.mkdir()
        (places.kernel / "capabilities.json").write_text(json.dumps(
            capabilities(constraints_manifest(Ceilings(), model), str(places.kernel))))
    life = places.live(model, start_broker=kind != "no-broker")
    assert life.exit_status == 0, life.stderr
    assert (places.work / "organism.el").read_bytes() == ORGANISM.read_bytes()
    assert sorted(p.name for p in places.work.iterdir()) == ["organism.el"]
    assert "no successor this time" in life.stderr
    assert [c["http_status"] for c in life.report.model_calls] == \
        ([] if status is None else [status])


def test_seed_asks_for_no_more_than_the_manifest_allows(
        tmp_path: Path, places: Places) -> None:
    life = places.live(replay(tmp_path, REPLY, max_output_tokens=777))
    assert life.report.model_calls[0]["requested_output_tokens"] == 777


def test_a_cut_off_reply_is_not_installed_and_the_note_reaches_the_next_life(
        tmp_path: Path, places: Places) -> None:
    """The broker signals a reply cut at the output-token limit; the seed keeps itself."""
    from tests.fakes.provider_server import FakeProvider, chat_ok, script

    half = chat_ok("(defun organism-live ()\n  (let ((x")
    half.json["choices"][0]["finish_reason"] = "length"
    with FakeProvider(script(half, chat_ok(""))) as fake:
        model = ModelConfig(provider="openai-compatible", name="local", base_url=fake.url,
                            request_timeout_seconds=30)
        life = places.live(model)
        assert life.exit_status == 0, life.stderr
        assert (places.work / "organism.el").read_bytes() == ORGANISM.read_bytes()
        notes = (places.work / "notes.md").read_text(encoding="utf-8")
        assert "cut off at the output-token limit" in notes and "not installed" in notes
        assert "the reply was cut off; not installed" in life.stderr
        (call,) = life.report.model_calls
        assert call["truncated"] is True and call["stop_reason"] == "length"

        shutil.rmtree(places.kernel)
        shutil.rmtree(places.private)
        places.live(model)  # the next life shows the model its notes
    prompt = fake.requests[1].json["messages"][0]["content"]
    assert "----- notes.md -----\n" + notes in prompt
