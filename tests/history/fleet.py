"""A grown fleet for the history commands and the viewer: real lineages, real kernel.

Built once per test session (real bubblewrap, cgroups and Emacs, offline
providers), under one temporary state dir:

- ``scribe`` and ``quiet``: the offline default fleet in ``specs/``, as shipped;
- ``story``: scribe's replies, grown to 3 generations, then a human's edit of
  the worktree (an ``external edit`` commit), then grown to 6: generation 4
  dies (exit 255), generation 6 finds its reply unreadable (a fifth reply that is
  not UTF-8: a model failure, code ``replay_exhausted``; a folder with no reply
  left would stop the lineage before the generation instead);
- ``hostile``: an organism whose file names, journal (through its stderr) and
  stderr hold ``<script>``, ``<img onerror>`` and ``javascript:`` text; its
  third life dies printing them. Then a foreign write (a commit on its
  observation branch that no kernel made) rewrites generation 1's observation
  with hostile ``ran_with`` fields (another kernel), a hostile provider failure
  message and a hostile stop reason;
- ``cut``: the seed organism against a loopback Anthropic (tests.fakes): its
  first reply is cut off at ``max_tokens`` (a truncated call), its second
  carries a hostile ``stop_reason``, its third is a 401 whose error text is
  hostile (a final provider failure: apply stops the lineage after gen 3).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest

from reconciler.kernel.base import formats
from reconciler.kernel.base.config import LineagePaths
from reconciler.spec.load import default_places
from tests.apply.helpers import REPO_ROOT, run_ouro, write_replies, write_spec
from tests.fakes.provider_server import (
    FakeProvider,
    Handler,
    Reply,
    Seen,
    anthropic_error,
    anthropic_models,
    anthropic_ok,
)

HOSTILE_NAMES = (
    "<script>window.__ouro_pwned=1<script>.txt",
    "<img src=x onerror=window.__ouro_pwned=2>.txt",
    "javascript:window.__ouro_pwned=3",
)
HOSTILE_STDERR = (
    "<script>window.__ouro_pwned=4</script>",
    '<img src=x onerror="window.__ouro_pwned=5">',
    "javascript:window.__ouro_pwned=6",
)


def _elisp_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


HOSTILE_BODY = (
    ";;; organism.el --- <script>window.__ouro_pwned=8</script>\n"
    "(let ((names (list " + " ".join(_elisp_string(n) for n in HOSTILE_NAMES) + ")))\n"
    "  (if (file-exists-p (expand-file-name (car names) \"/work\"))\n"
    "      (progn\n"
    + "".join(f"        (message \"%s\" {_elisp_string(line)})\n" for line in HOSTILE_STDERR)
    + "        (kill-emacs 3))\n"
    "    (dolist (name names)\n"
    "      (with-temp-file (expand-file-name name \"/work\")\n"
    "        (insert \"<script>window.__ouro_pwned=7</script>\\n\")))))\n"
)


# What a provider (cut) and a foreign writer (hostile gen 1) put where the viewer shows it.
HOSTILE_STOP = "<script>window.__ouro_pwned=10</script>"
HOSTILE_DETAIL = "<img src=x onerror=window.__ouro_pwned=11>"
FORGED_KERNEL = "<script>window.__ouro_pwned=12</script>"
FORGED_FINGERPRINT = "<img src=x onerror=window.__ouro_pwned=13>"
FORGED_VERSION = "javascript:window.__ouro_pwned=14"
FORGED_MESSAGE = "<img src=x onerror=window.__ouro_pwned=15> model unavailable"
FORGED_STOP = '"><script>window.__ouro_pwned=16</script>'
CUT_KEY_VARIABLE = "OURO_FLEET_CUT_KEY"
SEED_TEXT = (REPO_ROOT / "reconciler" / "kernel" / "transaction" / "organism.el").read_text()


def _cut_handler() -> Handler:
    """GET: the model list; POST n: a cut-off reply, a hostile stop reason, then a 401."""
    posts: list[int] = []

    def handler(seen: Seen, number: int) -> Reply:
        del number
        if seen.method == "GET":
            return anthropic_models()
        posts.append(1)
        if len(posts) == 1:
            reply = anthropic_ok("(message \"half a bo", output_tokens=12000)
            return Reply(json={**reply.json, "stop_reason": "max_tokens"}, headers=reply.headers)
        if len(posts) == 2:
            reply = anthropic_ok(SEED_TEXT, output_tokens=900)
            return Reply(json={**reply.json, "stop_reason": HOSTILE_STOP},
                         headers=reply.headers)
        return anthropic_error(401, "authentication_error", HOSTILE_DETAIL)

    return handler


def _grow_cut(root: Path, specs: Path, env: dict[str, str]) -> None:
    with FakeProvider(_cut_handler()) as fake:
        spec = write_spec(specs, "cut", 3, provider="anthropic", extra_model=(
            f"name: claude-opus-4-8\nbase_url: {fake.url}\nbudget_usd: \"2.00\"\n"
            f"api_key_env: {CUT_KEY_VARIABLE}\n"))
        result = run_ouro("apply", "--yes", str(spec),
                          env={**env, CUT_KEY_VARIABLE: "sk-fleet-cut-0123456789abcdef"},
                          timeout=600)
    # the 401 is final: apply stops the lineage after gen 3 and says so (exit 1)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "stopped after gen 3" in result.stdout + result.stderr, result.stderr


def _forge(paths: LineagePaths) -> None:
    """A foreign write: generation 1's observation rewritten by no kernel, committed on the
    observation branch as a human's `git commit` would."""
    repo = pygit2.Repository(str(paths.observations))
    name = formats.observation_path(1)
    record = json.loads((paths.observations / name).read_text())
    record["ran_with"] = {
        "kernel": {"commit": FORGED_KERNEL, "fingerprint": FORGED_FINGERPRINT,
                   "source": FORGED_VERSION},
        "control_plane": {"ouro_version": FORGED_VERSION, "ouro_commit": FORGED_KERNEL},
        "versions": {"emacs": FORGED_VERSION, "bubblewrap": FORGED_FINGERPRINT},
    }
    record["provider_failure"] = {"code": "other", "http_status": 418, "retryable": False,
                                  "every_call_failed": False, "stops_lineage": False,
                                  "message": FORGED_MESSAGE}
    for call in record["model_calls"]:
        call.update(stop_reason=FORGED_STOP, error_detail=FORGED_MESSAGE)
    (paths.observations / name).write_text(json.dumps(record, indent=2) + "\n")
    repo.index.add(name)
    repo.index.write()
    who = pygit2.Signature("someone else", "someone@example.invalid")
    repo.create_commit("HEAD", who, who, "edit gen 1 by hand\n", repo.index.write_tree(),
                       [repo.head.target])


@dataclass(frozen=True)
class Fleet:
    root: Path
    state: Path
    specs: Path  # a folder of the four specs
    env: dict[str, str]

    def paths(self, name: str) -> LineagePaths:
        return default_places(self.state / name, name)


def _apply(env: dict[str, str], *specs: Path) -> None:
    result = run_ouro("apply", "--yes", *map(str, specs), env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def build_fleet(root: Path) -> Fleet:
    state = root / "state"
    specs = root / "specs"
    specs.mkdir(parents=True)
    env = dict(os.environ)
    env["OURO_STATE_DIR"] = str(state)
    shutil.copy(REPO_ROOT / "specs" / "fleet.yaml", specs / "fleet.yaml")
    shutil.copytree(REPO_ROOT / "specs" / "replies", specs / "replies")
    shutil.copytree(REPO_ROOT / "specs" / "probes", specs / "probes")
    story_replies = specs / "replies" / "story"
    shutil.copytree(specs / "replies" / "scribe", story_replies)
    (story_replies / "0005").write_bytes(b"\xff\xfe not UTF-8\n")  # gen 6's model failure
    story = write_spec(specs, "story", 3, provider="replay", replay=str(story_replies))
    _apply(env, specs / "fleet.yaml", story)
    (state / "story" / "notes.md").write_text("a human was here <b>bold</b>\n")
    write_spec(specs, "story", 6, provider="replay", replay=str(story_replies))
    # its lives ask for nothing after the first: the second reply is never used, but a
    # replay generation runs only while its folder has a reply left
    replies = write_replies(specs / "hostile-replies", [HOSTILE_BODY, ";; never asked for\n"])
    hostile = write_spec(specs, "hostile", 3, provider="replay", replay=str(replies))
    _apply(env, story, hostile)
    _forge(default_places(state / "hostile", "hostile"))
    _grow_cut(root, specs, env)
    return Fleet(root, state, specs, env)


@pytest.fixture(scope="session")
def grown_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield build_fleet(tmp_path_factory.mktemp("fleet"))
