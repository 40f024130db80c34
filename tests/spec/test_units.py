"""Units: sizes, durations and money parse exactly, or are refused with a hint."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from reconciler.spec import units


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (0, 0), (268435456, 268435456), ("268435456", 268435456), ("512B", 512),
        ("1K", 1024), ("1Ki", 1024), ("1KiB", 1024), ("512M", 512 << 20), ("512MiB", 512 << 20),
        ("1G", 1 << 30), ("1GiB", 1 << 30), ("2T", 2 << 40), (" 64 MiB ", 64 << 20),
        ("1_024", 1024),
    ],
    ids=lambda v: repr(v),
)
def test_sizes(given: Any, expected: int) -> None:
    assert units.parse_size(given) == expected


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("1GB", "ambiguous: write 1G or 1GiB"), ("1gb", "ambiguous"), ("1.5G", "is not a size"),
        ("1Q", "unknown size unit 'Q'"), ("1g", "unknown size unit 'g'"), (-1, "negative"),
        ("", "is not a size"), ("G", "is not a size"), (1.5, "not float 1.5"),
        (True, "not boolean True"), (None, "not null"), ([1], "not a list"),
    ],
    ids=lambda v: repr(v),
)
def test_bad_sizes(given: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        units.parse_size(given)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (0, 0), (600, 600), ("600", 600), ("600s", 600), ("10m", 600), ("1h", 3600),
        ("1h30m", 5400), ("1h 30m 5s", 5405), ("2d", 172800), ("90sec", 90), ("5min", 300),
    ],
    ids=lambda v: repr(v),
)
def test_durations(given: Any, expected: int) -> None:
    assert units.parse_duration(given) == expected


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("10 minutes", "unknown duration unit 'minutes'"), ("1.5h", "is not a duration"),
        ("-5s", "is not a duration"), (-5, "negative"), ("soon", "is not a duration"),
        (1.5, "not float"), (False, "not boolean"), ("١٠s", "is not a duration"),
    ],
    ids=lambda v: repr(v),
)
def test_bad_durations(given: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        units.parse_duration(given)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("given", "expected"),
    [("1.00", Decimal("1.00")), ("0", Decimal(0)), (3, Decimal(3)), (" 2.50 ", Decimal("2.50")),
     ("0.000001", Decimal("0.000001"))],
    ids=lambda v: repr(v),
)
def test_money(given: Any, expected: Decimal) -> None:
    parsed = units.parse_money(given)
    assert parsed == expected and isinstance(parsed, Decimal)
    assert str(parsed) == str(expected)  # the written precision is kept


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        (1.5, 'not a YAML float (floats are inexact): write "1.5" with the quotes'),
        (float("nan"), "not a YAML float"), ("-1", "is not an amount"), ("$5", "is not an amount"),
        ("1e3", "is not an amount"), ("NaN", "is not an amount"), ("", "is not an amount"),
        (-2, "negative"), (True, "not boolean"), (None, "not null"),
    ],
    ids=lambda v: repr(v),
)
def test_bad_money(given: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        units.parse_money(given)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("value", "size"),
    [(1 << 30, "1GiB"), (0, "0"), (1000, "1000"), (600, "600"), (3 << 20, "3MiB")],
    ids=["1GiB", "zero", "odd", "600", "3MiB"],
)
def test_formatting_round_trips(value: int, size: str) -> None:
    assert units.format_size(value) == size
    assert units.parse_size(size) == value
    assert units.parse_duration(units.format_duration(value)) == value
