"""The kernel restores a dead generation's organism.el by the documented rule, and the
audit finds what it wrote consistent.

Histories are generated: the organism rewrites, deletes or keeps organism.el,
dies, or a human edits or deletes it between generations. The real kernel
(``run_generation`` with the fake sandbox of ``tests.kernel_generation``)
writes the lineage. Two independent checks: each death's organism.el must be the
one this file's own statement of the rule names (``expected_restore``, written from
docs/lineage-contract.md, not the kernel's ``restore_source`` the audit shares), and
the audit of what the kernel wrote must find nothing.
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


def expected_restore(bodies: list[bytes | None], death: int) -> bytes | None:
    """The rule in words (docs/lineage-contract.md): a death restores organism.el to the
    newest body before the one it extends that exists and differs from it; with none,
    the body stays as it was (a missing organism.el stays missing). ``bodies``: each
    first-parent commit's organism.el, root first."""
    extended = bodies[death - 1]
    older = [body for body in bodies[:death - 1] if body is not None and body != extended]
    return older[-1] if older else extended


def _texts(chain: list[pygit2.Commit]) -> list[bytes | None]:
    found: list[bytes | None] = []
    for commit in chain:
        try:
            found.append(commit.tree["organism.el"].data)
        except KeyError:
            found.append(None)
    return found


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=steps)
@example(history=[("live", None), ("edit", SEED), ("die", None)])  # [seed, none, seed]
@example(history=[("live", BODIES[1]), ("live", None), ("live", BODIES[1]), ("die", None)])
@example(history=[("edit", BODIES[2]), ("die", None), ("die", None)])
def test_the_kernel_restores_by_the_documented_rule_and_the_audit_finds_it_so(
        history: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = _write(Path(tmp), history)
        chain = _bodies(paths)
        texts = _texts(chain)
        deaths = [i for i, c in enumerate(chain) if ": died" in c.message.split("\n")[0]]
        for index in deaths:
            assert texts[index] == expected_restore(texts, index), (
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


def test_the_audits_rule_names_the_body_the_rule_in_words_names() -> None:
    """The audit's ``restored_organism`` against this file's ``expected_restore`` on
    hand-written histories (a letter per body, None for no organism.el)."""
    rows: list[tuple[list[str | None], str | None]] = [
        (["A", "B"], "A"), (["A", "B", "B"], "A"), (["A", None, "A"], "A"),
        ([None, "A"], "A"), (["A"], "A"), ([None], None), (["A", "B", None], "B"),
        (["A", "B", "C", "C"], "B")]
    for bodies, restored in rows:
        ids = [None if b is None else pygit2.hash(b) for b in bodies]
        texts = [None if b is None else b.encode() for b in bodies]
        death = len(bodies)  # the death extends the last
        assert expected_restore([*texts, None], death) == (
            None if restored is None else restored.encode()), bodies
        found = restored_organism(ids, death - 1)
        assert found == (None if restored is None else pygit2.hash(restored)), bodies
