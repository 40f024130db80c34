"""The recorded clean verdict (state.audit_record): the next audit reads only what is new,
and no damage hides behind the record.

The differential test is the heart: every damage of test_audit's table, done AFTER a clean
verdict was recorded, must give exactly the findings a full audit gives.
"""

from __future__ import annotations

import os
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from reconciler.state import audit_record
from reconciler.state.audit import audit_lineage
from reconciler.state.audit_record import audit_recorded, load, record_file
from tests.apply.helpers import run_ouro
from tests.verify.builder import Lineage, commit_of, target
from tests.verify.test_audit import CASES, _corrupt_an_object, _delete_an_object, sound


def _records(tmp_path: Path) -> Path:
    return tmp_path / "state" / ".audits"


def _findings(result: object) -> set[tuple[str, int | None]]:
    return {(f.code, f.generation) for f in result.findings}  # type: ignore[attr-defined]


def recorded(tmp_path: Path) -> Lineage:
    """A sound lineage (4 generations) whose clean verdict is recorded."""
    lineage = sound(tmp_path)
    first = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (first.status, first.resumed, first.generations) == ("consistent", 0, 4)
    assert load(_records(tmp_path), lineage.paths) is not None
    return lineage


def _object_path(lineage: Lineage, oid: pygit2.Oid, *, observations: bool = False) -> Path:
    hexid = str(oid)
    store = (lineage.paths.observations / ".git" if observations else lineage.paths.git_dir)
    return store / "objects" / hexid[:2] / hexid[2:]


# ------------------------------------------------------------------ reading only what is new


def test_the_next_audit_reads_only_the_new_generations(tmp_path: Path) -> None:
    lineage = recorded(tmp_path)
    lineage.no_change()
    lineage.changed({"organism.el": b'(message "new")\n'})
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (result.status, result.resumed, result.generations) == ("consistent", 4, 6)
    again = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (again.status, again.resumed, again.generations) == ("consistent", 6, 6)
    assert audit_lineage(lineage.paths, lineage.name).status == "consistent"


def test_the_record_really_is_trusted_and_full_reads_everything(tmp_path: Path) -> None:
    """Damage that leaves the file's size, inode and times alone (a disk's bit rot) is what
    a resumed audit cannot see: shown by forging the record to match a damaged object.
    ``full`` reads every object and finds it."""
    lineage = recorded(tmp_path)
    head = commit_of(lineage.observations, target(
        lineage.observations.references[f"refs/heads/{lineage.paths.observation_branch}"]))
    old = (head.tree / "generations" / "0002.json").id
    path = _object_path(lineage, old, observations=True)
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob 2\0{}"))  # the id no longer matches
    taken = audit_record.snapshot(lineage.paths)
    record = load(_records(tmp_path), lineage.paths)
    assert taken is not None and record is not None
    audit_record._store(_records(tmp_path), lineage.paths, record.resume, taken)  # the forgery

    resumed = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (resumed.status, resumed.resumed) == ("consistent", 4)  # not read again
    full = audit_recorded(lineage.paths, lineage.name, _records(tmp_path), full=True)
    assert (full.resumed, _findings(full)) == (0, {("object-unreadable", None)})
    assert load(_records(tmp_path), lineage.paths) is None  # findings: forgotten


# ------------------------------------------------------------------ no damage hides behind it


@pytest.mark.parametrize(
    ("damage", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_damage_after_a_recorded_verdict_is_found_exactly(
    tmp_path: Path, damage: Callable[[Lineage], None], expected: set[tuple[str, int | None]]
) -> None:
    lineage = recorded(tmp_path)
    damage(lineage)
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert _findings(result) == expected
    assert _findings(audit_lineage(lineage.paths, lineage.name)) == expected
    assert (load(_records(tmp_path), lineage.paths) is None) == bool(expected)


def test_appended_damage_is_found_by_the_resumed_audit_itself(tmp_path: Path) -> None:
    """The differential cases above run through the resumed path, not around it."""
    lineage = recorded(tmp_path)
    lineage.no_change(calls=[Lineage.call(5, accounted="0.60"), Lineage.call(5, accounted="0.41")])
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (result.resumed, _findings(result)) == (4, {("overspend", 5)})


@pytest.mark.parametrize("damage", [_corrupt_an_object, _delete_an_object],
                         ids=["corrupt-object", "missing-object"])
def test_an_old_object_damaged_after_the_record_is_found(
    tmp_path: Path, damage: Callable[[Lineage], None]
) -> None:
    lineage = recorded(tmp_path)
    lineage.no_change()
    damage(lineage)
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (result.resumed, [f.code for f in result.findings]) == (0, ["object-unreadable"])


def test_an_old_observation_touched_in_place_is_read_again(tmp_path: Path) -> None:
    """Rewritten with the same bytes (as git does when asked to write an object it has):
    read again, it is sound, and the audit still resumes."""
    lineage = recorded(tmp_path)
    head = commit_of(lineage.observations, target(
        lineage.observations.references[f"refs/heads/{lineage.paths.observation_branch}"]))
    path = _object_path(lineage, (head.tree / "generations" / "0001.json").id,
                        observations=True)
    path.chmod(0o644)
    path.write_bytes(path.read_bytes())
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (result.status, result.resumed) == ("consistent", 4)


def test_a_new_object_damaged_is_found(tmp_path: Path) -> None:
    lineage = recorded(tmp_path)
    oid = lineage.changed({"organism.el": b'(message "five")\n'})
    path = _object_path(lineage, (commit_of(lineage.repo, oid).tree / "organism.el").id)
    path.chmod(0o644)
    path.write_bytes(b"garbage")
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert "object-unreadable" in {f.code for f in result.findings}


def test_a_rewritten_history_is_audited_in_full(tmp_path: Path) -> None:
    lineage = recorded(tmp_path)
    branch = lineage.repo.references[f"refs/heads/{lineage.paths.branch}"]
    branch.set_target(commit_of(lineage.repo, target(branch)).parent_ids[0])
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert result.resumed == 0 and result.status == "findings"


def test_packing_the_objects_costs_one_full_audit(tmp_path: Path) -> None:
    lineage = recorded(tmp_path)
    for store in (lineage.paths.git_dir, lineage.paths.observations / ".git"):
        subprocess.run(["git", "--git-dir", str(store), "gc", "-q", "--prune=now"], check=True)
    first = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (first.status, first.resumed) == ("consistent", 0)
    second = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (second.status, second.resumed) == ("consistent", 4)


def test_borrowed_objects_are_never_vouched_for(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    elsewhere = tmp_path / "elsewhere.git"
    pygit2.init_repository(str(elsewhere), bare=True)
    info = lineage.paths.git_dir / "objects" / "info"
    info.mkdir(exist_ok=True)
    (info / "alternates").write_text(f"{elsewhere / 'objects'}\n")
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert result.status == "consistent"
    assert load(_records(tmp_path), lineage.paths) is None


# ------------------------------------------------------------------ a record that does not hold


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def _flip_a_body_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))


def _edit_the_header(path: Path) -> None:
    path.write_bytes(path.read_bytes().replace(b'"generations":4', b'"generations":3', 1))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _not_json(path: Path) -> None:
    path.write_bytes(b"\xff\xfe garbage\n" + path.read_bytes())


@pytest.mark.parametrize("damage", [_truncate, _flip_a_body_byte, _edit_the_header, _empty,
                                    _not_json])
def test_a_damaged_record_is_ignored_and_replaced(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    lineage = recorded(tmp_path)
    damage(record_file(_records(tmp_path), lineage.paths))
    assert load(_records(tmp_path), lineage.paths) is None
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (result.status, result.resumed) == ("consistent", 0)
    assert load(_records(tmp_path), lineage.paths) is not None


def test_another_audits_record_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record written by other audit code (an older ouro) vouches for other rules."""
    lineage = recorded(tmp_path)
    monkeypatch.setattr(audit_record, "_version", "0" * 64)
    assert load(_records(tmp_path), lineage.paths) is None


def test_another_lineages_record_is_ignored(tmp_path: Path) -> None:
    one = recorded(tmp_path / "one")
    other = sound(tmp_path / "other", "u")
    os.replace(record_file(_records(tmp_path / "one"), one.paths),
               record_file(_records(tmp_path / "one"), other.paths))
    assert load(_records(tmp_path / "one"), other.paths) is None


def test_an_unwritable_record_dir_loses_only_the_shortcut(tmp_path: Path) -> None:
    lineage = sound(tmp_path)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder\n")
    result = audit_recorded(lineage.paths, lineage.name, blocked / ".audits")
    assert result.status == "consistent"


# ------------------------------------------------------------------ ouro verify


def test_ouro_verify_resumes_and_full_reads_all(tmp_path: Path) -> None:
    lineage = sound(tmp_path / "lineages")
    spec = tmp_path / "t.yaml"
    spec.write_text(
        "apiVersion: ouro/v1\nkind: Lineage\nmetadata:\n  name: t\nspec:\n  generations: 4\n"
        "  model:\n    provider: echo\n    name: echo\n"
        f"  storage:\n    path: {lineage.paths.worktree}\n", encoding="utf-8")
    env = dict(os.environ, OURO_STATE_DIR=str(tmp_path / "state"))
    first = run_ouro("verify", str(spec), env=env)
    assert first.returncode == 0, first.stderr
    assert "t: consistent (4 generations, 4 observations)\n" in first.stdout
    lineage.no_change()
    second = run_ouro("verify", str(spec), env=env)
    assert second.returncode == 0, second.stderr
    assert ("1 new generation read, the earlier 4 as the last clean audit left them"
            in second.stdout)
    full = run_ouro("verify", str(spec), "--full", "--json", env=env)
    assert full.returncode == 0 and '"resumed": 0' in full.stdout


# ------------------------------------------------------------------ truncated loose objects
# libgit2 1.9 loops forever reading a truncated loose object (libgit2#7342); the audit
# reads loose objects itself first. Each case runs the real supervised child with a
# timeout: a hang would be `unknown` (timed out), not the finding.


def _truncate_object(path: Path, keep: Callable[[int], int]) -> None:
    data = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(data[:keep(len(data))])


CUTS = [(lambda n: 2, "two-bytes"), (lambda n: n // 2, "half"), (lambda n: n - 4, "no-adler")]


@pytest.mark.parametrize("keep", [c[0] for c in CUTS], ids=[c[1] for c in CUTS])
@pytest.mark.parametrize("where", ["journal", "observation", "head-commit"])
def test_a_truncated_loose_object_is_a_finding_not_a_hang(
    tmp_path: Path, keep: Callable[[int], int], where: str
) -> None:
    from reconciler.engine.verify import verify

    lineage = sound(tmp_path)
    obs_head = commit_of(lineage.observations, target(
        lineage.observations.references[f"refs/heads/{lineage.paths.observation_branch}"]))
    path = {
        "journal": lambda: _object_path(
            lineage, (lineage.repo[lineage.commits[2]].tree / "journal.md").id),
        "observation": lambda: _object_path(
            lineage, (obs_head.tree / "generations" / "0002.json").id, observations=True),
        "head-commit": lambda: _object_path(lineage, lineage.head()),
    }[where]()
    _truncate_object(path, keep)
    report = verify([(lineage.name, lineage.paths)], timeout=60)
    assert report.outcome == "completed", report
    assert [f.code for f in report.findings] == ["object-unreadable"]


def test_a_truncated_new_object_after_a_record_is_a_finding(tmp_path: Path) -> None:
    lineage = recorded(tmp_path)
    oid = lineage.changed({"organism.el": b'(message "five")\n'})
    _truncate_object(_object_path(lineage, (commit_of(lineage.repo, oid).tree
                                            / "organism.el").id), lambda n: n // 2)
    result = audit_recorded(lineage.paths, lineage.name, _records(tmp_path))
    assert (result.resumed, [f.code for f in result.findings]) == (0, ["object-unreadable"])


def test_the_object_store_reads_only_whole_objects(tmp_path: Path) -> None:
    from reconciler.state.audit_objects import ObjectStore

    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    oid = repo.create_blob(b"x" * 5000 + bytes(range(256)))
    store = ObjectStore(repo)
    assert store.load(oid.raw) == (b"blob", b"x" * 5000 + bytes(range(256)))
    path = tmp_path / "r.git" / "objects" / str(oid)[:2] / str(oid)[2:]
    honest = path.read_bytes()
    path.chmod(0o644)
    for damaged in (b"", honest[:2], honest[:-1], honest + b"garbage",
                    zlib.compress(b"blob 3\0abc")):
        path.write_bytes(damaged)
        assert store.load(oid.raw) is None, damaged[:10]
    path.unlink()
    path.mkdir()
    assert store.load(oid.raw) is None  # not a file
    assert store.load(b"\x01" * 20) is None  # absent, not packed either


def test_a_tree_that_hashes_right_but_does_not_parse_is_unreadable(tmp_path: Path) -> None:
    """Written raw (libgit2 refuses to build a commit on it): its id matches its bytes, but
    git could not read it either. Both passes say so, and neither raises."""
    from reconciler.state.audit_objects import unreadable_newest, unreadable_reachable

    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    kinds = pygit2.enums.ObjectType
    tree = repo.odb.write(kinds.TREE, b"100644 x\0short")
    who = b"a <a@b> 0 +0000"
    commit = repo.odb.write(kinds.COMMIT, b"tree " + str(tree).encode() + b"\nauthor " + who
                            + b"\ncommitter " + who + b"\n\nm\n")
    assert unreadable_reachable(repo, commit) == [tree.raw]
    assert unreadable_newest(repo, commit) == [tree.raw]
    odd = repo.odb.write(kinds.COMMIT, b"tree nothex\n\nm\n")
    assert unreadable_reachable(repo, odd) == [odd.raw]


def test_a_forged_record_over_a_corrupt_object_is_not_believed(tmp_path: Path) -> None:
    """What the attacker did (issue 23): damaged an object, then wrote a record vouching
    for the damaged store, every digest recomputed; only the MAC, made with the state
    dir's secret it cannot read, is wrong. ``ouro verify`` (resuming, not --full) and the
    audit apply runs find the damage."""
    from reconciler.state.cachefile import CacheSeal

    lineage = recorded(tmp_path)
    head = commit_of(lineage.observations, target(
        lineage.observations.references[f"refs/heads/{lineage.paths.observation_branch}"]))
    path = _object_path(lineage, (head.tree / "generations" / "0002.json").id,
                        observations=True)
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob 2\0{}"))
    taken = audit_record.snapshot(lineage.paths)
    record = load(_records(tmp_path), lineage.paths)
    assert taken is not None and record is not None
    forged = audit_record._encode(lineage.paths, record.resume, taken, CacheSeal(b"g" * 32))
    record_file(_records(tmp_path), lineage.paths).write_bytes(forged)
    assert load(_records(tmp_path), lineage.paths) is None

    spec = tmp_path / "t.yaml"
    spec.write_text("apiVersion: ouro/v1\nkind: Lineage\nmetadata:\n  name: t\nspec:\n"
                    "  generations: 4\n  model:\n    provider: openai\n    name: gpt-5.6\n"
                    f"  storage:\n    path: {lineage.paths.worktree}\n")
    done = run_ouro("verify", str(spec), env={**os.environ,
                                              "OURO_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "object-unreadable" in done.stdout, done.stdout
