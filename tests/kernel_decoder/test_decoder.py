"""The trusted decoder against hostile archives: every refusal names its path."""

from __future__ import annotations

import io
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.kernel.base.errors import DecoderRejection
from reconciler.kernel.sandbox.decoder import Entry, decode, path_budget

Member = tuple[str, str, bytes | str]  # (name, kind, data or link target)


def build(members: list[Member], *, fmt: int = tarfile.GNU_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt, encoding="utf-8",
                      errors="surrogateescape") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(data, bytes)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
                continue
            if kind == "exe":
                assert isinstance(data, bytes)
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
                "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE,
                "cont": tarfile.CONTTYPE,
            }[kind]
            if kind in ("symlink", "hardlink"):
                assert isinstance(data, str)
                info.linkname = data
            tar.addfile(info)
    return buffer.getvalue()


GOOD: list[Member] = [(".", "dir", b""), ("./organism.el", "file", b"(message \"hi\")\n")]


def sparse_archive() -> bytes:
    """A GNU tar of a big sparse file (what `tar -S` makes), built by the real tar."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with (root / "hole").open("wb") as handle:
            handle.truncate(1 << 30)
        return subprocess.run(["tar", "-C", folder, "-S", "--format=gnu", "-cf", "-", "hole"],
                              check=True, capture_output=True).stdout


def pax_with_big_header() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("file")
        info.pax_headers = {"comment": "x" * (1 << 20)}
        tar.addfile(info, io.BytesIO(b""))
    return buffer.getvalue()


def truncated() -> bytes:
    data = build([*GOOD, ("big", "file", b"y" * 5000)])
    return data[:1536]


def truncated_at_header_boundary() -> bytes:
    data = build([*GOOD, ("later", "file", b"z")])
    # header of '.', header+data of organism.el: cut before 'later' -- no end marker left
    return data[: 512 + 1024]


def trailing_garbage() -> bytes:
    return build(GOOD) + b"\x01" * 10


def bad_checksum() -> bytes:
    data = bytearray(build(GOOD))
    data[0] ^= 0x20  # first header's name byte
    return bytes(data)


def old_style_dir_hiding_a_device() -> bytes:
    """An old-style (type NUL) entry named 'd/' with a size: tarfile reads it as a
    directory and parses its 'data' as the next header, a device; both passes must agree."""
    hidden = build([("dev", "chr", b"")])[:512]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, data in GOOD:
            assert isinstance(data, bytes)
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if kind == "dir" else tarfile.REGTYPE
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("d/")
        info.type, info.size = tarfile.AREGTYPE, 512
        tar.addfile(info, io.BytesIO(hidden))
    return buffer.getvalue()


@dataclass(frozen=True)
class Case:
    id: str
    archive: Callable[[], bytes]
    path: str | None
    message: str
    max_files: int = 100
    max_bytes: int = 1 << 20


def arch(members: list[Member]) -> Callable[[], bytes]:
    return lambda: build(members)


REJECTED = [
    Case("absolute-path", arch([*GOOD, ("/etc/passwd", "file", b"x")]), "/etc/passwd", "absolute"),
    Case("dotdot-top", arch([*GOOD, ("../escape", "file", b"x")]), "../escape", "'..'"),
    Case("dotdot-inner", arch([*GOOD, ("a/../../escape", "file", b"x")]), "a/../../escape",
         "'..'"),
    Case("dot-inner", arch([*GOOD, ("a/./b", "file", b"x")]), "a/./b", "'.'"),
    Case("empty-component", arch([*GOOD, ("a//b", "file", b"x")]), "a//b", "empty"),
    Case("git-top-dir", arch([*GOOD, (".git", "dir", b""), (".git/config", "file", b"x")]),
         ".git", ".git"),
    Case("git-file", arch([*GOOD, (".git", "file", b"gitdir: /x")]), ".git", ".git"),
    Case("git-deep", arch([*GOOD, ("a/b/.git/hooks/post-commit", "file", b"x")]),
         "a/b/.git/hooks/post-commit", ".git"),
    Case("git-uppercase", arch([*GOOD, ("sub/.GIT/config", "file", b"x")]), "sub/.GIT/config",
         ".git"),
    Case("git-trailing-dot", arch([*GOOD, (".git./config", "file", b"x")]), ".git./config",
         ".git"),
    *[Case(f"git-disguise-{index}", arch([*GOOD, (name, "file", b"x")]), name, "git refuses")
      for index, name in enumerate(["GIT~1", "git~1", ".git::$INDEX_ALLOCATION", ".g\u200cit",
                                    ".GIT.", ".git ", "a/\ufeff.gIt/x", "d\\.git", "Git~1.."])],
    Case("gitmodules-symlink", arch([*GOOD, (".gitmodules", "symlink", "organism.el")]),
         ".gitmodules", "git refuses"),
    Case("gitmodules-short-symlink", arch([*GOOD, ("GITMOD~1", "symlink", "organism.el")]),
         "GITMOD~1", "git refuses"),
    Case("symlink-to-disguised-git", arch([*GOOD, ("l", "symlink", "x/git~1/config")]), "l",
         ".git"),
    Case("symlink-then-file-through-it",
         arch([*GOOD, ("link", "symlink", "sub"), ("link/evil", "file", b"x")]), "link/evil",
         "through a symlink"),
    Case("file-then-child", arch([*GOOD, ("f", "file", b"x"), ("f/child", "file", b"x")]),
         "f/child", "through a regular file"),
    Case("child-then-symlink-parent",
         arch([*GOOD, ("d/x", "file", b"x"), ("d", "symlink", "elsewhere")]), "d",
         "used as a directory"),
    Case("symlink-absolute", arch([*GOOD, ("l", "symlink", "/etc/passwd")]), "l", "absolute"),
    Case("symlink-escapes", arch([*GOOD, ("a/l", "symlink", "../../outside")]), "a/l",
         "leaves the tree"),
    Case("symlink-escapes-through-link",
         arch([*GOOD, ("d/b", "symlink", ".."), ("a", "symlink", "d/b/../..")]), "a",
         "leaves the tree"),
    Case("symlink-loop", arch([*GOOD, ("a", "symlink", "b/x"), ("b", "symlink", "a/y")]), "a",
         "too many levels"),
    Case("symlink-to-git", arch([*GOOD, ("l", "symlink", "x/.git")]), "l", ".git"),
    Case("symlink-empty", arch([*GOOD, ("l", "symlink", "")]), "l", "empty symlink"),
    Case("hardlink", arch([*GOOD, ("h", "hardlink", "organism.el")]), "h", "hardlink"),
    Case("char-device", arch([*GOOD, ("null", "chr", b"")]), "null", "character device"),
    Case("block-device", arch([*GOOD, ("sda", "blk", b"")]), "sda", "block device"),
    Case("fifo", arch([*GOOD, ("pipe", "fifo", b"")]), "pipe", "FIFO"),
    Case("contiguous", arch([*GOOD, ("c", "cont", b"")]), "c", "contiguous"),
    Case("duplicate-file", arch([*GOOD, ("x", "file", b"1"), ("x", "file", b"2")]), "x",
         "duplicate"),
    Case("duplicate-dir", arch([*GOOD, ("d", "dir", b""), ("./d/", "dir", b"")]), "d",
         "duplicate"),
    Case("too-many-files", arch([*GOOD, *[(f"f{i}", "file", b"") for i in range(5)]]), "f3",
         "more than 4 files", max_files=4),
    Case("too-many-dirs", arch([*GOOD, *[(f"d{i}", "dir", b"") for i in range(5)]]), "d4",
         "more than 4 directories", max_files=4),
    Case("too-many-bytes", arch([*GOOD, ("big", "file", b"b" * 2000)]), "big",
         "more than 1024 bytes", max_bytes=1024),
    Case("too-many-bytes-summed",
         arch([*GOOD, ("a", "file", b"a" * 510), ("b", "file", b"b" * 510)]), "b",
         "more than 1024 bytes", max_bytes=1024),
    Case("non-utf8-name", arch([*GOOD, ("bad-\udcff-name", "file", b"x")]), "bad-\\xff-name",
         "not valid UTF-8"),
    Case("non-utf8-link", arch([*GOOD, ("l", "symlink", "t-\udcfe")]), "t-\\xfe",
         "not valid UTF-8"),
    Case("overlong-component", arch([*GOOD, ("n" * 300, "file", b"x")]), "n" * 300,
         "longer than 255"),
    Case("overlong-path", arch([*GOOD, ("/".join(["d" * 200] * 25), "file", b"x")]), None,
         "long name record"),
    Case("huge-pax-header", pax_with_big_header, "PaxHeader", "pax header"),
    Case("pax-any", lambda: build([*GOOD, ("é", "file", b"x")], fmt=tarfile.PAX_FORMAT),
         None, "pax header"),
    Case("sparse-1GiB", sparse_archive, "hole", "sparse file"),
    Case("truncated-in-data", truncated, None, "truncated"),
    Case("truncated-at-boundary", truncated_at_header_boundary, None, "truncated"),
    Case("trailing-garbage", trailing_garbage, None, "zero blocks only"),
    Case("bad-checksum", bad_checksum, None, "checksum"),
    Case("empty-archive", lambda: b"", None, "truncated"),
    Case("root-not-a-dir", arch([(".", "file", b"x")]), ".", "root must be a directory"),
    Case("file-with-trailing-slash", arch([*GOOD, ("f/", "file", b"x")]), "f/",
         "not a directory"),
    Case("old-style-dir-hiding-a-device", old_style_dir_hiding_a_device, "dev",
         "character device"),
]


@pytest.mark.parametrize("case", REJECTED, ids=[c.id for c in REJECTED])
def test_hostile_archive_is_rejected_with_its_path(case: Case) -> None:
    with pytest.raises(DecoderRejection) as caught:
        decode(case.archive(), max_files=case.max_files, max_bytes=case.max_bytes)
    assert case.message in str(caught.value)
    if case.path is not None:
        assert caught.value.path is not None
        assert case.path in caught.value.path
    assert str(caught.value).startswith("kernel: decoder: ")


def test_clean_tree_decodes_every_kind() -> None:
    entries = decode(
        build([
            *GOOD,
            ("sub", "dir", b""),
            ("sub/tool.sh", "exe", b"#!/bin/sh\n"),
            ("sub/link", "symlink", "../organism.el"),
            ("dangling", "symlink", "not/yet/there"),
            ("sub/deep/inner", "file", b"implicit parent"),
            (".gitignore", "file", b"*\n"),
            ("gitx/.gitkeep", "file", b""),
        ]),
        max_files=10, max_bytes=1000,
    )
    assert entries == [
        Entry("organism.el", "file", b'(message "hi")\n', False),
        Entry("sub", "dir", b"", False),
        Entry("sub/tool.sh", "file", b"#!/bin/sh\n", True),
        Entry("sub/link", "symlink", b"../organism.el", False),
        Entry("dangling", "symlink", b"not/yet/there", False),
        Entry("sub/deep/inner", "file", b"implicit parent", False),
        Entry(".gitignore", "file", b"*\n", False),
        Entry("gitx/.gitkeep", "file", b"", False),
    ]


def test_kernel_owned_names_are_dropped_not_fatal() -> None:
    """As the original runner deletes them before archiving: neither published nor counted."""
    entries = decode(
        build([*GOOD, ("journal.md", "file", b"forged" * 100),
               (".ouroboros-lineage.json", "dir", b""),
               (".ouroboros-lineage.json/inner", "file", b"x" * 100),
               ("kept", "file", b"k")]),
        max_files=2, max_bytes=len(GOOD[1][2]) + 1,
    )
    assert [e.path for e in entries] == ["organism.el", "kept"]


def test_names_git_accepts_are_accepted() -> None:
    names = ["gitx", ".gitx", "git~2", ".gi", "GIT~10", ".gitmodules", ".git\u0130",
             "gi7eba~12"]
    entries = decode(build([*GOOD, *[(n, "file", b"") for n in names]]), max_files=20,
                     max_bytes=1000)
    assert [e.path for e in entries][1:] == names


def long_path(length: int) -> str:
    """A relative path of exactly ``length`` bytes, in components of 200 bytes or fewer."""
    parts: list[str] = []
    while length > 201:
        parts.append("d" * 200)
        length -= 201
    return "/".join([*parts, "f" * length])


def test_path_budget_is_what_fits_below_the_worktree(tmp_path: Path) -> None:
    worktree = tmp_path / "w"
    budget = path_budget(worktree)
    assert budget == 4096 - len(str(worktree).encode()) - 2
    assert long_path(budget).encode().__len__() == budget
    entries = decode(build([*GOOD, (long_path(budget), "file", b"")]), max_files=100,
                     max_bytes=100, max_path_bytes=budget)
    assert entries[-1].path == long_path(budget)
    with pytest.raises(DecoderRejection, match="PATH_MAX"):
        decode(build([*GOOD, (long_path(budget + 1), "file", b"")]), max_files=100,
               max_bytes=100, max_path_bytes=budget)


def test_limits_are_inclusive() -> None:
    members = [*GOOD, ("a", "file", b"a" * 100), ("b", "file", b"b" * 100)]
    size = len(GOOD[1][2]) + 200
    assert len(decode(build(members), max_files=3, max_bytes=size)) == 3
    with pytest.raises(DecoderRejection):
        decode(build(members), max_files=2, max_bytes=size)
    with pytest.raises(DecoderRejection):
        decode(build(members), max_files=3, max_bytes=size - 1)


def test_size_header_is_not_trusted(tmp_path: Path) -> None:
    """A header that claims a small size but whose data overruns is caught by structure."""
    data = bytearray(build([*GOOD, ("x", "file", b"q" * 1024)]))
    # Patch the size of 'x' to 1 block less, fixing the checksum: data then looks like headers.
    offset = data.index(b"x\0")
    header = bytearray(data[offset : offset + 512])
    header[124:136] = b"%011o\0" % 512
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    data[offset : offset + 512] = header
    with pytest.raises(DecoderRejection):
        decode(bytes(data), max_files=10, max_bytes=1 << 20)


def test_real_gnu_tar_of_a_tree_decodes(tmp_path: Path) -> None:
    """The runner's exact tar command (minus /work) produces what the decoder accepts."""
    (tmp_path / "organism.el").write_text("(message \"x\")\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / ("long-" * 40)).write_text("long name\n")
    (tmp_path / "d" / "hard").write_text("h\n")
    (tmp_path / "hard2").hardlink_to(tmp_path / "d" / "hard")
    (tmp_path / "ln").symlink_to("d/hard")
    archive = subprocess.run(
        ["tar", "-C", str(tmp_path), "--format=gnu", "--sort=name", "--numeric-owner",
         "--owner=0", "--group=0", "--hard-dereference", "-cf", "-", "."],
        check=True, capture_output=True,
    ).stdout
    entries = {e.path: e for e in decode(archive, max_files=10, max_bytes=1000)}
    assert set(entries) == {"d", "d/hard", "d/" + "long-" * 40, "hard2", "ln", "organism.el"}
    assert entries["hard2"].kind == "file" and entries["hard2"].data == b"h\n"
    assert entries["ln"].data == b"d/hard"


def test_depth_is_bounded_by_what_git_can_check_out() -> None:
    from reconciler.kernel.sandbox.decoder import MAX_DEPTH

    deepest = "/".join(["d"] * (MAX_DEPTH - 1) + ["f"])
    assert decode(build([*GOOD, (deepest, "file", b"x")]), max_files=10,
                  max_bytes=100)[-1].path == deepest
    with pytest.raises(DecoderRejection, match="deeper than 100"):
        decode(build([*GOOD, ("d/" + deepest, "file", b"x")]), max_files=10, max_bytes=100)
