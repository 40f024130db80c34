"""The comparison's one exception, the kernel's clock, as a table (pure, no lineage): a
journal heading of generation N carrying the reproduction's stamp of N gets the record's;
nothing else is touched (a time the organism wrote, another generation's heading)."""

from __future__ import annotations

import pytest

from reconciler.engine.reproduce.compare import Clock, Side, compare_generation

RECORDED = "\n## gen 1 — changed — organism +1/-0; 1 paths — 2026-12-01T10:00:00+00:00\n"
REPRODUCED = "\n## gen 1 — changed — organism +1/-0; 1 paths — 2026-12-03T08:00:00+00:00\n"


def _clock() -> Clock:
    clock = Clock()
    clock.learn(RECORDED, REPRODUCED)
    return clock


@pytest.mark.parametrize(
    ("text", "expected"),
    [(REPRODUCED, RECORDED),
     ("prompt\n----- journal.md -----" + REPRODUCED + "more",
      "prompt\n----- journal.md -----" + RECORDED + "more"),
     ("### gen 1 — changed — x — 2026-12-03T08:00:00+00:00",  # a fork's demoted heading
      "### gen 1 — changed — x — 2026-12-01T10:00:00+00:00"),
     ("now: 2026-12-03T08:00:00+00:00\n", "now: 2026-12-03T08:00:00+00:00\n"),
     ("## gen 2 — changed — x — 2026-12-03T08:00:00+00:00",  # not gen 2's stamp
      "## gen 2 — changed — x — 2026-12-03T08:00:00+00:00"),
     ("## gen 1 — changed — x — 2026-12-05T00:00:00+00:00",  # not the kernel's stamp
      "## gen 1 — changed — x — 2026-12-05T00:00:00+00:00")],
    ids=["heading", "in-a-prompt", "demoted", "organism-time", "other-generation",
         "another-time"],
)
def test_only_the_kernels_stamps_are_put_back(text: str, expected: str) -> None:
    assert _clock().unclocked(text) == expected


def _side(observation: dict[str, object], files: dict[str, bytes],
          mode: int = 0o100644) -> Side:
    blobs = {f"id-{path}-{data!r}": data for path, data in files.items()}
    return Side(observation, {path: (mode, f"id-{path}-{data!r}")
                              for path, data in files.items()}, blobs.__getitem__)


@pytest.mark.parametrize(
    ("observation", "files", "what"),
    [({"outcome": "changed", "exit_status": 0}, {"a": b"1"}, None),
     ({"outcome": "no-change", "exit_status": 0}, {"a": b"1"}, ("outcome",)),
     ({"outcome": "changed", "exit_status": 0}, {"a": b"2"}, ("tree",)),
     ({"outcome": "changed", "exit_status": 0}, {"a": b"1", "b": b""}, ("tree",)),
     ({"outcome": "changed", "exit_status": 0, "model_calls": [{"prompt": "p"}]},
      {"a": b"1"}, ("calls",))],
    ids=["same", "outcome", "bytes", "added", "a-call-more"],
)
def test_what_differs(observation: dict[str, object], files: dict[str, bytes],
                      what: tuple[str, ...] | None) -> None:
    recorded = _side({"outcome": "changed", "exit_status": 0}, {"a": b"1"})
    found = compare_generation(3, recorded, _side(observation, files), Clock())
    assert (found.what if found else None) == what


def test_a_mode_alone_is_a_difference() -> None:
    recorded = _side({"outcome": "changed", "exit_status": 0}, {"a": b"1"})
    executable = _side({"outcome": "changed", "exit_status": 0}, {"a": b"1"}, 0o100755)
    found = compare_generation(2, recorded, executable, Clock())
    assert found is not None and found.what == ("tree",)
    assert [(p.path, p.change, p.diff) for p in found.paths] == [
        ("a", "mode", ("mode 100644 -> 100755",))]
