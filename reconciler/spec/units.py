"""Units of a spec: sizes, durations and money, parsed exactly or refused.

Pure functions, no I/O. Each parser takes what YAML produced (int, str, float,
bool, None, ...) and returns the canonical value (bytes, whole seconds,
``Decimal``) or raises ``ValueError`` with a message that says what to write
instead. Pydantic turns those into field errors; the loader adds the position.

Choices (docs/spec.md repeats them):
- sizes are binary, like systemd: ``K``/``KiB`` = 2^10, ``M``/``MiB`` = 2^20,
  ``G``/``GiB`` = 2^30, ``T``/``TiB`` = 2^40 (the original instrument's
  ``MemoryMax=1G`` is 2^30 bytes); a bare integer is bytes. ``KB``/``MB``/``GB``
  are refused as ambiguous.
- durations are whole seconds: ``600``, ``600s``, ``10m``, ``1h``, ``1h30m``.
- money is a decimal string (``"1.00"``) or an integer; a YAML float is refused
  because binary floats are not money.
"""

from __future__ import annotations

import re
import reprlib
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = [
    "DURATION_PATTERN",
    "MONEY_PATTERN",
    "POSITIVE_DURATION_PATTERN",
    "POSITIVE_MONEY_PATTERN",
    "POSITIVE_SIZE_PATTERN",
    "SIZE_PATTERN",
    "describe",
    "format_duration",
    "format_size",
    "kind",
    "parse_duration",
    "parse_money",
    "parse_size",
]

_SIZE_SHIFTS = {"": 0, "B": 0}
for _letter, _shift in (("K", 10), ("M", 20), ("G", 30), ("T", 40)):
    for _suffix in (_letter, _letter + "i", _letter + "iB"):
        _SIZE_SHIFTS[_suffix] = _shift

_SIZE_RE = re.compile(r"^\s*([0-9][0-9_]*)\s*([A-Za-z]*)\s*$")
_AMBIGUOUS_SIZES = {"kb", "mb", "gb", "tb"}

_DURATION_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_DURATION_PART = re.compile(r"([0-9]+)\s*([a-z]+)")
_DURATION_RE = re.compile(r"^\s*(?:[0-9]+\s*[a-z]+\s*)+$")

_MONEY_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*$")

# What the parsers accept, as JSON Schema (ECMA-262) patterns for editors; the POSITIVE_
# variants also require a value above zero (at least one non-zero digit). The tests feed
# the parsers and these patterns the same strings.
_UNIT = r"(s|sec|m|min|h|d)"
SIZE_PATTERN = r"^\s*[0-9][0-9_]*\s*([KMGT](i|iB)?|B)?\s*$"
POSITIVE_SIZE_PATTERN = r"^\s*(0[0_]*)?[1-9][0-9_]*\s*([KMGT](i|iB)?|B)?\s*$"
DURATION_PATTERN = rf"^\s*([0-9]+\s*{_UNIT}\s*)+$|^\s*[0-9]+\s*$"
POSITIVE_DURATION_PATTERN = (
    rf"^\s*(0+\s*{_UNIT}\s*)*0*[1-9][0-9]*\s*{_UNIT}\s*([0-9]+\s*{_UNIT}\s*)*$"
    r"|^\s*0*[1-9][0-9]*\s*$"
)
MONEY_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*$"
POSITIVE_MONEY_PATTERN = r"^\s*([0-9]*[1-9][0-9]*(\.[0-9]+)?|[0-9]+\.[0-9]*[1-9][0-9]*)\s*$"

_short = reprlib.Repr()
_short.maxstring = 40
_short.maxother = 40
_short.maxlist = 4
_short.maxdict = 4
_short.maxlevel = 2


def _scalar_type(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string"}.get(
        type(value), type(value).__name__)


def kind(value: Any) -> str:
    """What a value is, without any of it: "a string", "an integer", "null", "a mapping"."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    name = _scalar_type(value)
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def describe(value: Any) -> str:
    """A short, safe rendering of a YAML value for error messages (``kind`` and the value)."""
    if value is None or isinstance(value, dict | list):
        return kind(value)
    return f"{_scalar_type(value)} {_short.repr(value)}"


def parse_size(value: Any) -> int:
    """Bytes from ``268435456``, ``256M``, ``256MiB``, ``1G`` (binary units)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(
            f"a size is bytes (an integer) or a string like 512MiB or 1G, not {describe(value)}"
        )
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative (got {value})")
        return value
    match = _SIZE_RE.match(value)
    if match is None:
        raise ValueError(
            f"{_short.repr(value)} is not a size: write bytes (268435456) or a whole number "
            "with K, M, G, T (or KiB, MiB, GiB, TiB; both mean powers of 1024)"
        )
    digits, suffix = match.groups()
    if suffix.lower() in _AMBIGUOUS_SIZES:
        raise ValueError(
            f"{_short.repr(value)} is ambiguous: write {digits}{suffix[0].upper()} or "
            f"{digits}{suffix[0].upper()}iB (both powers of 1024, as in systemd)"
        )
    if suffix not in _SIZE_SHIFTS:
        raise ValueError(
            f"{_short.repr(value)}: unknown size unit {suffix!r}; use K, M, G, T "
            "(or KiB, MiB, GiB, TiB)"
        )
    return int(digits.replace("_", "")) << _SIZE_SHIFTS[suffix]


def parse_duration(value: Any) -> int:
    """Whole seconds from ``600``, ``600s``, ``10m``, ``1h``, ``1h30m``, ``2d``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(
            f"a duration is whole seconds (600) or a string like 600s, 10m, 1h, not "
            f"{describe(value)}"
        )
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a duration cannot be negative (got {value})")
        return value
    text = value.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    if not text.isascii() or _DURATION_RE.match(text) is None:
        raise ValueError(
            f"{_short.repr(value)} is not a duration: write seconds (600) or 600s, 10m, 1h, 1h30m"
        )
    total = 0
    for digits, unit in _DURATION_PART.findall(text):
        if unit not in _DURATION_UNITS:
            raise ValueError(
                f"{_short.repr(value)}: unknown duration unit {unit!r}; use s, m, h or d"
            )
        total += int(digits) * _DURATION_UNITS[unit]
    return total


def parse_money(value: Any) -> Decimal:
    """An exact, non-negative amount of USD from ``"1.00"`` or ``3``; never a float."""
    if isinstance(value, float):
        shown = repr(value) if value == value and abs(value) != float("inf") else "1.00"
        raise ValueError(
            f"money must be a quoted decimal string, not a YAML float (floats are inexact): "
            f'write "{shown}" with the quotes'
        )
    if isinstance(value, Decimal):
        if not value.is_finite() or value < 0:
            raise ValueError(f"money must be a finite amount >= 0 (got {value})")
        return value
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f'money is a quoted decimal string like "1.00", not {describe(value)}')
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"money cannot be negative (got {value})")
        return Decimal(value)
    match = _MONEY_RE.match(value)
    if match is None:
        raise ValueError(
            f'{_short.repr(value)} is not an amount of USD: write a decimal like "1.00" '
            "(no sign, no currency symbol, no exponent)"
        )
    try:
        return Decimal(match.group(1))
    except InvalidOperation as error:  # unreachable given the pattern; kept as a guard
        raise ValueError(f"{_short.repr(value)} is not an amount of USD") from error


def format_size(value: int) -> str:
    """``1GiB`` for 2^30, bytes when not a whole unit (for documentation and messages)."""
    for suffix, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if value and value % (1 << shift) == 0:
            return f"{value >> shift}{suffix}"
    return str(value)


def format_duration(seconds: int) -> str:
    for suffix, unit in (("h", 3600), ("m", 60)):
        if seconds and seconds % unit == 0:
            return f"{seconds // unit}{suffix}"
    return f"{seconds}s"
