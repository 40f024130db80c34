"""Names git refuses in a tree, on any host. Trusted harness.

Rule: the one home of "would git refuse this path component?". git's fsck always
checks both families of disguised ``.git`` names, and its checkout refuses them
under ``core.protectNTFS`` (on by default) and ``core.protectHFS``; libgit2's tree
builder refuses the NTFS family. A name refused here can therefore never be
committed, checked out or fscked cleanly, so the decoder rejects it (a death),
publication refuses it again, and a human's file of that name in a worktree is
refused before it could become an ``external edit``.

The rules, as git states them (read-cache.c ``verify_path``, path.c ``is_ntfs_dotgit``
and ``is_ntfs_dot_generic``, utf8.c ``is_hfs_dotgit``), reimplemented here:

- NTFS: ``.git`` or its 8.3 short name ``git~1``, in any case, followed by nothing,
  or only by dots and spaces, or by ``:`` (an alternate data stream such as
  ``.git::$INDEX_ALLOCATION``), or by a backslash; each part after a backslash in
  a name is checked the same way (Windows reads ``a\\.git`` as a path);
- HFS+: ``.git`` in any case once the code points HFS+ ignores are dropped
  (``.g\\u200cit`` is ``.git`` there);
- a symlink named ``.gitmodules`` in any of those spellings (including its 8.3
  names ``gitmod~1``..``gitmod~4`` and ``gi7eba~N``): git refuses to check it out.
"""

from __future__ import annotations

import string

__all__ = ["refused"]

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)

# Code points HFS+ ignores when it compares names (git's utf8.c next_hfs_char).
_HFS_IGNORED = frozenset(
    {0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF}
)


def _only_dots_spaces_until_end(rest: str) -> bool:
    """What may follow a disguised name for NTFS to read it as the name itself."""
    for char in rest:
        if char in "\\:":
            return True
        if char not in ". ":
            return False
    return True


def _ntfs_dot_generic(name: str, needle: str, short_prefix: str) -> bool:
    """``.<needle>``, its regular 8.3 name (6 letters, ``~1``..``~4``) or its fall-back
    8.3 name (``short_prefix`` shortened, ``~`` and digits, 8 characters)."""
    lower = name.translate(_ASCII_LOWER)  # git compares ASCII letters only, in any case
    if lower.startswith("." + needle):
        return _only_dots_spaces_until_end(name[1 + len(needle) :])
    if lower[:6] == needle[:6] and name[6:7] == "~" and name[7:8] in ("1", "2", "3", "4"):
        return _only_dots_spaces_until_end(name[8:])
    if len(name) < 8:
        return False
    saw_tilde = False
    index = 0
    while index < 8:
        char = name[index]
        if saw_tilde:
            if not "0" <= char <= "9":
                return False
        elif char == "~":
            index += 1
            if index >= len(name) or not "1" <= name[index] <= "9":
                return False
            saw_tilde = True
        elif index >= 6 or char.translate(_ASCII_LOWER) != short_prefix[index]:
            return False
        index += 1
    return _only_dots_spaces_until_end(name[8:])


def _ntfs_dotgit(name: str) -> bool:
    lower = name.translate(_ASCII_LOWER)
    for disguise in (".git", "git~1"):
        if lower.startswith(disguise):
            return _only_dots_spaces_until_end(name[len(disguise) :])
    return False


def _hfs_equals(name: str, needle: str) -> bool:
    """``name`` is ``needle`` (ASCII, lower case) to HFS+: ignored code points dropped,
    ASCII letters in any case; any other non-ASCII character makes it differ."""
    kept = [char for char in name if ord(char) not in _HFS_IGNORED]
    return "".join(kept).translate(_ASCII_LOWER) == needle


def _ntfs_parts(name: str) -> list[str]:
    """The name, and each part after a backslash (read as a separator by Windows)."""
    parts = [name]
    index = name.find("\\")
    while index != -1:
        parts.append(name[index + 1 :])
        index = name.find("\\", index + 1)
    return parts


def refused(name: str, *, symlink: bool = False) -> bool:
    """True if git refuses a tree entry named ``name`` (one path component)."""
    if _hfs_equals(name, ".git"):
        return True
    if symlink and _hfs_equals(name, ".gitmodules"):
        return True
    for part in _ntfs_parts(name):
        if _ntfs_dotgit(part):
            return True
        if symlink and _ntfs_dot_generic(part, "gitmodules", "gi7eba"):
            return True
    return False
