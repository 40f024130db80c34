"""The loader: files, folders, documents, positions, resolution and the LoadedSpec API."""

from __future__ import annotations

import hashlib
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import SpecError
from reconciler.kernel.base.config import Ceilings, LineagePaths, ModelConfig, Price
from reconciler.spec.load import LoadedSpec, load_specs, state_dir

MINIMAL = """\
apiVersion: ouro/v1
kind: Lineage
metadata:
  name: {name}
spec:
  generations: 2
  model:
    provider: echo
"""


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def problems(paths: list[Path]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_specs(paths)
    return [str(p) for p in caught.value.problems]


def only(paths: list[Path], **kwargs: Path) -> LoadedSpec:
    loaded = load_specs(paths, **kwargs)
    assert len(loaded) == 1
    return loaded[0]


# --- defaults and the kernel values ---------------------------------------------------


def test_minimal_spec_has_the_original_instruments_defaults(tmp_path: Path) -> None:
    spec = only([write(tmp_path, "a.yaml", MINIMAL.format(name="alpha"))])
    assert spec.ceilings() == Ceilings()
    assert spec.model() == ModelConfig(provider="echo", name="echo")
    assert spec.spec.spec.generations == 2
    assert spec.instrument_pin is None
    assert spec.name == "alpha"
    assert spec.file == tmp_path / "a.yaml"
    assert (spec.document_index, spec.line) == (0, 1)
    assert len(spec.sha256) == 64


def test_default_storage_lives_in_the_state_dir(tmp_path: Path) -> None:
    spec = only([write(tmp_path, "a.yaml", MINIMAL.format(name="alpha"))])
    home = tmp_path / "state"  # OURO_STATE_DIR, set by conftest
    assert spec.paths() == LineagePaths(
        worktree=home / "alpha",
        git_dir=home / "alpha.git",
        observations=home / "alpha.observations",
        branch="lineage-alpha",
        observation_branch="observations/lineage-alpha",
    )
    assert spec.paths().name == "alpha"
    # the resolved spec carries the same values
    assert spec.spec.spec.storage.path == home / "alpha"


def test_explicit_state_dir_wins(tmp_path: Path) -> None:
    spec = only([write(tmp_path, "a.yaml", MINIMAL.format(name="alpha"))],
                state_dir=tmp_path / "elsewhere")
    assert spec.paths().worktree == tmp_path / "elsewhere" / "alpha"


def test_relative_storage_resolves_against_the_spec_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = MINIMAL.format(name="alpha") + """\
  storage:
    path: ../lineages/alpha
    git_dir: /srv/git/alpha.git
    observations: obs
    branch: evo/alpha
"""
    spec_file = write(tmp_path / "specs", "a.yaml", text)
    monkeypatch.chdir(tmp_path / "specs")
    spec = only([Path("a.yaml")])
    assert spec.file == spec_file
    assert spec.paths() == LineagePaths(
        worktree=tmp_path / "lineages" / "alpha",
        git_dir=Path("/srv/git/alpha.git"),
        observations=tmp_path / "specs" / "obs",
        branch="evo/alpha",
        observation_branch="observations/evo/alpha",
    )


def test_replay_folder_is_relative_to_the_spec_file(tmp_path: Path) -> None:
    (tmp_path / "specs" / "replies" / "one").mkdir(parents=True)
    (tmp_path / "specs" / "replies" / "one" / ".keep").write_text("")
    text = MINIMAL.format(name="alpha").replace(
        "provider: echo", "provider: replay\n    replay: replies/one"
    )
    spec = only([write(tmp_path / "specs", "a.yaml", text)])
    assert spec.model().replay_dir == tmp_path / "specs" / "replies" / "one"
    assert spec.model().price == Price(Decimal(0), Decimal(0))


@pytest.mark.parametrize(
    ("provider_lines", "key_env", "price"),
    [
        ("provider: anthropic\n    name: claude-opus-4-8", "ANTHROPIC_API_KEY", ("5", "25")),
        ("provider: anthropic\n    name: claude-opus-4-6", "ANTHROPIC_API_KEY", ("5", "25")),
        ("provider: openai\n    name: gpt-5.6-sol", "OPENAI_API_KEY", ("5", "30")),
        ("provider: openai\n    name: gpt-5.6-terra", "OPENAI_API_KEY", ("2.50", "15")),
        ("provider: openai\n    name: gpt-5.6-luna\n    api_key_env: MY_KEY", "MY_KEY", ("1", "6")),
        (
            "provider: openai-compatible\n    name: qwen\n    base_url: http://127.0.0.1:11434/v1/"
            '\n    price: {input_usd_per_mtok: "0.10", output_usd_per_mtok: 2}',
            None,
            ("0.10", "2"),
        ),
        ("provider: echo", None, ("0", "0")),
    ],
    ids=["opus-4-8", "opus-4-6", "gpt-sol", "gpt-terra", "own-key-env", "compatible", "echo"],
)
def test_model_config(
    tmp_path: Path, provider_lines: str, key_env: str | None, price: tuple[str, str]
) -> None:
    text = MINIMAL.format(name="m").replace("provider: echo", provider_lines)
    model = only([write(tmp_path, "m.yaml", text)]).model()
    assert model.api_key_env == key_env
    assert model.price == Price(Decimal(price[0]), Decimal(price[1]))
    if model.provider == "openai-compatible":
        assert model.base_url == "http://127.0.0.1:11434/v1"


def test_units_reach_the_kernel_values(tmp_path: Path) -> None:
    text = MINIMAL.format(name="u") + """\
  ceilings: {wall: 2m, cpu: 1m, memory: 512MiB, swap: 1G, worktree: 1048576, tmp: 8M, run: 1Mi}
  instrument: {commit: AABBCCDDEEFF00112233445566778899AABBCCDD}
"""
    text = text.replace("provider: echo", "provider: echo\n    request_timeout: 1h30m\n"
                        '    budget_usd: "0.25"\n    max_prompt_bytes: 64K')
    spec = only([write(tmp_path, "u.yaml", text)])
    assert spec.ceilings() == Ceilings(
        wall_seconds=120, cpu_seconds=60, memory_bytes=512 << 20, swap_bytes=1 << 30,
        worktree_bytes=1 << 20, tmp_bytes=8 << 20, run_bytes=1 << 20,
    )
    model = spec.model()
    assert (model.request_timeout_seconds, model.budget_usd, model.max_prompt_bytes) == (
        5400, Decimal("0.25"), 65536)
    assert spec.instrument_pin == "aabbccddeeff00112233445566778899aabbccdd"


# --- files, folders, documents --------------------------------------------------------


def test_multi_document_files(tmp_path: Path) -> None:
    text = "---\n" + MINIMAL.format(name="one") + "---\n---\n# c\n" + MINIMAL.format(name="two")
    loaded = load_specs([write(tmp_path, "fleet.yaml", text)])
    assert [(s.name, s.document_index, s.line) for s in loaded] == [
        ("one", 0, 2), ("two", 2, 13)]


def test_problem_positions_in_a_later_document(tmp_path: Path) -> None:
    text = MINIMAL.format(name="one") + "---\n" + MINIMAL.format(name="two").replace(
        "generations: 2", "generations: many")
    path = write(tmp_path, "fleet.yaml", text)
    assert problems([path]) == [
        f"{path}:15:16: spec.generations: input should be a valid integer (got string 'many')"
    ]


def test_folders_are_walked_sorted_recursively_skipping_hidden(tmp_path: Path) -> None:
    write(tmp_path, "b.yml", MINIMAL.format(name="b"))
    write(tmp_path, "a/z.yaml", MINIMAL.format(name="az"))
    write(tmp_path, "c.yaml", MINIMAL.format(name="c"))
    write(tmp_path, ".hidden.yaml", "not: a spec")
    write(tmp_path, ".github/workflows/ci.yml", "on: push")
    write(tmp_path, "notes.txt", "not yaml")
    loaded = load_specs([tmp_path])
    assert [s.name for s in loaded] == ["az", "b", "c"]


def test_the_same_file_twice_is_loaded_once(tmp_path: Path) -> None:
    path = write(tmp_path, "a.yaml", MINIMAL.format(name="a"))
    assert len(load_specs([tmp_path, path])) == 1


def test_anchors_and_merge_keys(tmp_path: Path) -> None:
    text = """\
apiVersion: ouro/v1
kind: Lineage
metadata: {name: merged}
spec:
  generations: 1
  model: &m {provider: echo, budget_usd: "0.5"}
  ceilings:
    <<: {wall: 100s, cpu: 0s}
    memory: 1G
"""
    path = write(tmp_path, "m.yaml", text)
    assert problems([path]) == [
        f"{path}:8:27: spec.ceilings.cpu: must be at least 1, not integer 0"
    ]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"apiVersion: ouro/v1\nkind: \xff\n", "2:7: not UTF-8 text: a byte here cannot be "
         "decoded (specs are UTF-8)"),
        (b"", "1:1: empty: no spec document in this file"),
        (b"# only a comment\n---\n", "1:1: empty: no spec document in this file"),
        (b"just a string\n", "1:1: a spec document is a mapping with apiVersion, kind, metadata "
         "and spec, not a string"),
        (b"a: 1\n\tb: 2\n", "2:1: YAML syntax error: while scanning for the next token; found "
         "character '\\t' that cannot start any token"),
        (b"a: \x07\n", "1:4: YAML cannot contain character '\\x07' (control characters are "
         "not allowed)"),
        (b"!!python/object:os.system {}\n", "1:1: YAML syntax error: could not determine a "
         "constructor for the tag"),
        (b"apiVersion: ouro/v1\n", "1:1: kind: required, but missing (this file must say kind: "
         "Lineage or LineageSet)"),
        (b"1: x\napiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: k}\n"
         b"spec: {generations: 1, model: {provider: echo}}\n",
         "1:1: 1: unknown field; keys are strings (got integer 1)"),
        (b"a: " + b"[" * 100 + b"]" * 100, "1:68: nested more than 64 levels deep"),
        (b"apiVersion: ouro/v1\na: '[[[[" + b"[" * 100 + b"'\n# " + b"{" * 100 + b"\n",
         "1:1: kind: required, but missing (this file must say kind: Lineage or LineageSet)"),
        (b"#" * ((1 << 20) + 1), "1:1: too large for a spec file (1048577 bytes; at most "
         "1048576)"),
    ],
    ids=["not-utf8", "empty", "comment-only", "scalar", "tab", "control-char", "python-tag",
         "no-kind", "int-key", "too-deep", "brackets-in-quotes-and-comments", "too-large"],
)
def test_bad_files_give_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    path = write(tmp_path, "x.yaml", content)
    assert problems([path]) == [f"{path}:{expected}"]


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, "bom.yaml", "\ufeff" + MINIMAL.format(name="bom"))
    assert only([path]).name == "bom"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p / "nope.yaml", "1:1: no such file or folder"),
        (lambda p: p / "nothing-here", "1:1: no *.yaml or *.yml spec files in this folder"),
    ],
    ids=["nonexistent", "folder-without-specs"],
)
def test_paths_that_hold_no_specs(tmp_path: Path, make: object, expected: str) -> None:
    (tmp_path / "nothing-here").mkdir()
    (tmp_path / "nothing-here" / "readme.txt").write_text("hi")
    path = make(tmp_path)  # type: ignore[operator]
    assert problems([path]) == [f"{path}:{expected}"]


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "locked.yaml", MINIMAL.format(name="x"))

    real_open = os.open

    def refuse(file: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(file) == path:  # root reads any file: deny this one at the syscall's door
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    assert problems([path]) == [f"{path}:1:1: cannot read: Permission denied"]


def test_no_paths_at_all() -> None:
    with pytest.raises(SpecError):
        load_specs([])


def test_every_problem_of_every_file_at_once(tmp_path: Path) -> None:
    bad = MINIMAL.format(name="x").replace("generations: 2", "generations: -1")
    one = write(tmp_path, "1.yaml", bad)
    two = write(tmp_path, "2.yaml", "a: [")
    three = write(tmp_path, "3.yaml", bad.replace("name: x", "name: y"))
    found = problems([tmp_path])
    assert [line.split(":")[0] for line in found] == [str(one), str(two), str(three)]


# --- uniqueness -----------------------------------------------------------------------


def test_duplicate_names_name_both_places(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", MINIMAL.format(name="twin"))
    second = write(tmp_path, "b.yaml", "\n\n" + MINIMAL.format(name="twin"))
    assert problems([tmp_path]) == [
        f"{second}:6:9: metadata.name: lineage 'twin' is already defined at {first}:4:9; "
        "names must be unique"
    ]


def test_two_lineages_cannot_share_a_place(tmp_path: Path) -> None:
    one = MINIMAL.format(name="one") + "  storage: {path: shared}\n"
    two = MINIMAL.format(name="two") + "  storage: {path: other, git_dir: shared.git}\n"
    path = write(tmp_path, "f.yaml", one + "---\n" + two)
    assert problems([path]) == [
        f"{path}:19:35: spec.storage.git_dir: {tmp_path}/shared.git is already used by "
        f"lineage 'one' ({path}:4:9)"
    ]


def test_one_lineages_places_must_differ(tmp_path: Path) -> None:
    text = MINIMAL.format(name="one") + "  storage: {path: here, observations: here}\n"
    path = write(tmp_path, "f.yaml", text)
    assert problems([path]) == [
        f"{path}:9:39: spec.storage.observations: {tmp_path}/here is already used by its own "
        "storage"
    ]


# --- provenance -----------------------------------------------------------------------


def test_sha256_is_of_the_meaning_not_the_spelling(tmp_path: Path) -> None:
    a = write(tmp_path, "a/s.yaml", MINIMAL.format(name="s") + "  ceilings: {wall: 600}\n")
    b = write(tmp_path, "b/s.yaml", "# other comment\n" + MINIMAL.format(name="s")
              + "  ceilings: {wall: 10m}\n")
    c = write(tmp_path, "c/s.yaml", MINIMAL.format(name="s").replace("generations: 2",
                                                                     "generations: 3"))
    specs = [only([p], state_dir=tmp_path / "st") for p in (a, b, c)]
    sums = [spec.sha256 for spec in specs]
    assert sums[0] == sums[1] != sums[2]
    # docs/spec.md: the sha256 of the canonical JSON form (the validated spec as written,
    # defaults filled, keys sorted), computed here from the written document itself
    import json

    from ruamel.yaml import YAML

    from reconciler.spec.models import LineageSpec

    for path, spec in zip((a, b, c), specs, strict=True):
        document = LineageSpec.model_validate(YAML(typ="safe").load(path.read_text()))
        canonical = json.dumps(document.model_dump(mode="json", by_alias=True),
                               sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert spec.sha256 == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    # the digest is of the spec, not of where its lineage lives
    assert only([a], state_dir=tmp_path / "elsewhere").sha256 == sums[0]
    assert sums[0] != hashlib.sha256(b"").hexdigest()


# --- state dir ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("explicit", "env", "xdg", "expected"),
    [
        ("/x/explicit", "/x/env", "/x/xdg", "/x/explicit"),
        (None, "/x/env", "/x/xdg", "/x/env"),
        (None, "", "/x/xdg", "/x/xdg/ouro/lineages"),
        (None, "", "relative/xdg", "{home}/.local/share/ouro/lineages"),
        (None, "", "", "{home}/.local/share/ouro/lineages"),
    ],
    ids=["explicit", "env", "xdg", "relative-xdg-ignored", "home"],
)
def test_state_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    explicit: str | None, env: str, xdg: str, expected: str,
) -> None:
    monkeypatch.setenv("OURO_STATE_DIR", env)
    monkeypatch.setenv("XDG_DATA_HOME", xdg)
    monkeypatch.setenv("HOME", str(tmp_path))
    got = state_dir(Path(explicit) if explicit else None)
    assert got == Path(expected.replace("{home}", str(tmp_path)))


def test_no_home_no_default_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OURO_STATE_DIR", "")
    monkeypatch.setenv("XDG_DATA_HOME", "")

    def homeless() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(homeless))
    placed = MINIMAL.format(name="placed") + "  storage: {path: here}\n"
    path = write(tmp_path, "f.yaml", placed + "---\n" + MINIMAL.format(name="homeless"))
    assert problems([path]) == [
        f"{path}:16:3: spec.storage.path: no default: the state dir cannot be found (Could not "
        "determine home directory.); set spec.storage.path, --state-dir or OURO_STATE_DIR"
    ]
    assert only([write(tmp_path / "ok", "f.yaml", placed)]).paths().worktree == (
        tmp_path / "ok" / "here")


def test_a_custom_branch_keeps_the_specs_name(tmp_path: Path) -> None:
    """The lineage's name is the spec's metadata.name, never read off the branch."""
    from reconciler.kernel.transaction.recovery import scope_prefix

    text = MINIMAL.format(name="alpha") + "  storage:\n    branch: evo/alpha-2\n"
    spec = only([write(tmp_path, "a.yaml", text)])
    assert (spec.paths().branch, spec.paths().name) == ("evo/alpha-2", "alpha")
    assert scope_prefix(spec.paths()).startswith("alpha.")


# --- pseudo-filesystems ---------------------------------------------------------------


@pytest.mark.parametrize("place", ["/proc/self/lineage", "/sys/fs/x", "/dev/shm/lineage"])
def test_a_place_under_a_pseudo_filesystem_is_refused_at_load(tmp_path: Path, place: str) -> None:
    text = MINIMAL.format(name="one") + f"  storage: {{path: {place}}}\n"
    path = write(tmp_path, "f.yaml", text)
    found = problems([path])
    named = [p for p in found if p.startswith(f"{path}:9:19: spec.storage.path: {place} is ")]
    assert len(named) == 1 and "pseudo-filesystem" in named[0], found
    assert "choose another path" in named[0]
    assert any("spec.storage.git_dir" in problem for problem in found)


def test_a_symlink_into_proc_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "innocent").symlink_to("/proc/self")
    text = MINIMAL.format(name="one") + "  storage: {path: innocent/x}\n"
    path = write(tmp_path, "f.yaml", text)
    assert any("is under /proc" in problem for problem in problems([path]))


def test_a_state_dir_under_dev_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "f.yaml", MINIMAL.format(name="one"))
    with pytest.raises(SpecError) as caught:
        load_specs([path], state_dir=Path("/dev/shm/ouro"))
    assert "is under /dev" in str(caught.value)
