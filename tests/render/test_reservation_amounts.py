"""A call's reservation is read by the kernel's one rule of a recorded USD amount
(``kernel.base.formats.usd_amount``): what the spend counts, the report shows."""

from __future__ import annotations

import pytest

from reconciler.kernel.base.formats import call_spend, usd_amount
from reconciler.report.calls import reservation


@pytest.mark.parametrize("amount", ["0.25", 2, 0, "1e-3", -1, "-0.5", 1.5, True, "NaN", None])
def test_the_report_reads_an_amount_as_the_spend_does(amount: object) -> None:
    known = usd_amount(amount)
    shown = reservation({"reserved_usd": amount})
    assert shown == (str(known) if known is not None else "none")
    assert call_spend({"accounted_usd": None, "reserved_usd": amount}) == (known or 0)


def test_an_integer_reservation_is_shown() -> None:
    """The case the report's own parser got wrong: an integer is an amount to the kernel."""
    assert reservation({"reserved_usd": 3}) == "3"
    peak = reservation({"attempts": [{"reserved_usd": 1}, {"reserved_usd": "0.5"}]})
    assert peak.startswith("1 at most at once (the peak of 2 attempts")
