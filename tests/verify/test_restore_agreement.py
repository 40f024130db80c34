"""The audit and the kernel restore a dead generation's organism.el by one rule.

Histories are generated: the organism rewrites, deletes or keeps organism.el,
dies, or a human edits or deletes it between generations. The real kernel
(``run_generation`` with the fake sandbox of ``tests.kernel_generation``)
writes the lineage; the audit of what it wrote must find no
``restore-mismatch``, and the audit's rule on the written bodies must name what
the kernel wrote.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pygit2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reconciler.kernel.base.config import Ceilings, Identity, LineagePaths
from reconciler.kernel.base.identity import fingerprint
from reconciler.kernel.transaction import lineage as kernel_lineage
from reconciler.kernel.transaction.generation import run_generation
from reconciler.state.audit import audit_lineage, restored_organism
from tests.kernel_generation.helpers import ECHO, TEST_COMMIT, Fake

SEED = kernel_lineage.ORGANISM.read_text()
BODIES = (SEED, "(message \"A\")\n", "(message \"B\")\n", None)  # None: no organism.el
Step = tuple[str, str | None]  # ("live", body) | ("die", None) | ("edit", body)

steps = st.lists(
    st.one_of(
        st.tuples(st.just("live"), st.sampled_from(BODIES)),
        st.tuples(st.just("die"), st.none()),
        st.tuples(st.just("edit"), st.sampled_from(BODIES)),
    ),
    min_size=1,
    max_size=5,
)


def _write(root: Path, history: list[Step]) -> LineagePaths:
    paths = LineagePaths(root / "lin", root / "lin.git", root / "lin.observations",
                         "lineage-restore", "observations/lineage-restore")
    kernel_lineage.init_lineage(paths, Identity("https://example.invalid/ouro.git", "main",
                                                TEST_COMMIT, fingerprint()))
    identity = Identity("https://example.invalid/ouro.git", "main", TEST_COMMIT, fingerprint())
    organism = paths.worktree / "organism.el"
    for action, body in history:
        if action == "edit":
            if body is None:
                organism.unlink(missing_ok=True)
            else:
                organism.write_text(body)
            continue
        fake = Fake(exit_status=1 if action == "die" else 0)
        if action == "live":
            fake.files = {"notes.txt": "kept\n"} | ({"organism.el": body} if body else {})
        run_generation(paths=paths, identity=identity, model=ECHO, ceilings=Ceilings(),
                       api_key=None, runtime=fake.runtime())
    return paths


def _bodies(paths: LineagePaths) -> list[pygit2.Commit]:
    repo = pygit2.Repository(str(paths.git_dir))
    commit = repo.revparse_single(paths.branch).peel(pygit2.Commit)
    chain = [commit]
    while commit.parents:
        commit = commit.parents[0]
        chain.append(commit)
    return chain[::-1]


def _organism(commit: pygit2.Commit) -> pygit2.Oid | None:
    try:
        return commit.tree["organism.el"].id
    except KeyError:
        return None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=steps)
@example(history=[("live", None), ("edit", SEED), ("die", None)])  # [seed, none, seed]
@example(history=[("live", BODIES[1]), ("live", None), ("live", BODIES[1]), ("die", None)])
@example(history=[("edit", BODIES[2]), ("die", None), ("die", None)])
def test_the_audit_agrees_with_the_kernel(history: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = _write(Path(tmp), history)
        chain = _bodies(paths)
        organisms = [_organism(c) for c in chain]
        deaths = [i for i, c in enumerate(chain) if ": died" in c.message.split("\n")[0]]
        for index in deaths:
            assert organisms[index] == restored_organism(organisms, index - 1), (
                history, [c.message.split("\n")[0] for c in chain])
        findings = {f.code for f in audit_lineage(paths, "restore").findings}
        assert "restore-mismatch" not in findings, (history, findings)
        assert findings == set(), (history, findings)


def test_a_none_a_is_kept_by_both() -> None:
    """The named history: organism A (the seed's), then no organism.el, then A again, then
    a death: the kernel keeps A (no other body was ever there), and so must the audit."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = _write(Path(tmp), [("live", None), ("live", SEED), ("die", None)])
        chain = _bodies(paths)
        organisms = [_organism(c) for c in chain]
        assert organisms[-1] == organisms[-2] == organisms[0] is not None  # kept A
        assert organisms[-3] is None
        assert restored_organism(organisms, len(chain) - 2) == organisms[-1]
        assert audit_lineage(paths, "restore").findings == ()
