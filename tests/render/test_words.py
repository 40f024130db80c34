"""Counts agree with their nouns, and a retried call's reservations read as what was held."""

from __future__ import annotations

import pytest

from reconciler.report.calls import reservation
from reconciler.report.words import plural


@pytest.mark.parametrize(("count", "text"), [(0, "0 paths"), (1, "1 path"), (2, "2 paths")])
def test_plural(count: int, text: str) -> None:
    assert plural(count, "path") == text


def test_six_retried_reservations_read_as_the_peak_not_their_sum() -> None:
    """Six attempts of $0.026 against a $0.10 budget: each reservation is returned when its
    attempt ends, so $0.156 was never held; the peak is shown, and said to be the peak."""
    call = {"reserved_usd": "0.156", "attempts": [{"reserved_usd": "0.026"}] * 6}
    text = reservation(call)
    assert text == ("0.026 at most at once (the peak of 6 attempts, each returned when it "
                    "ended)")
    assert "0.156" not in text


@pytest.mark.parametrize(
    ("call", "text"),
    [({"reserved_usd": "0.026", "attempts": [{"reserved_usd": "0.026"}]}, "0.026"),
     ({"reserved_usd": None, "attempts": []}, "none"),
     ({"reserved_usd": "NaN", "attempts": [{"reserved_usd": "x"}, {}]}, "none")],
    ids=["one-attempt", "none-recorded", "foreign-values"],
)
def test_a_call_that_was_not_retried_shows_its_reservation(call: dict[str, object],
                                                           text: str) -> None:
    assert reservation(call) == text
