"""A generation's spending ledger. Trusted harness; runs inside the model broker.

Rule: money is ``Decimal`` and spend can never exceed the budget. Before every
provider attempt the worst case is reserved (prompt tokens estimated from above
as one token per prompt byte plus a fixed framing allowance, plus every
requested output token, at the configured prices); what cannot fit is refused.
An attempt is then settled: at the usage it is given (the broker clamps a
reported usage to what the request could cost first), at nothing when the
provider certainly produced nothing billable (it was never reached, or it
answered with an error status), and otherwise at the full reservation.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from ..base.config import Price

__all__ = ["PROMPT_FRAMING_TOKENS", "Ledger", "Reservation", "Usage", "estimate_prompt_tokens",
           "usd_text", "worst_case_usd"]

# Providers count tokens of message framing on top of the text itself; the original
# instrument allows 4,096, and a budget here is never looser than there.
PROMPT_FRAMING_TOKENS = 4096
ZERO = Decimal(0)


def usd_text(amount: Decimal) -> str:
    """An amount as records spell it: plain decimal notation, never an exponent."""
    return format(amount, "f")


def estimate_prompt_tokens(prompt_bytes: int) -> int:
    """An upper bound of the input tokens of a prompt of this many UTF-8 bytes."""
    return prompt_bytes + PROMPT_FRAMING_TOKENS


def worst_case_usd(price: Price, prompt_bytes: int, output_tokens: int) -> Decimal:
    """The most one attempt with this prompt and output limit can cost."""
    return price.worst_case(estimate_prompt_tokens(prompt_bytes), output_tokens)


@dataclass(frozen=True)
class Usage:
    """Tokens a provider reports having billed for one response."""

    input_tokens: int
    output_tokens: int

    def cost(self, price: Price) -> Decimal:
        return price.worst_case(self.input_tokens, self.output_tokens)

    def clamped(self, input_tokens: int, output_tokens: int) -> Usage:
        """This usage, each count at most the given bound (what a request could cost)."""
        return Usage(min(self.input_tokens, input_tokens), min(self.output_tokens, output_tokens))

    def as_record(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


@dataclass(frozen=True)
class Reservation:
    amount: Decimal


class Ledger:
    """Budget, reservations outstanding, and what has been spent (settled)."""

    def __init__(self, budget: Decimal, price: Price) -> None:
        if budget < ZERO:
            raise ValueError("budget must not be negative")
        self.budget = budget
        self.price = price
        self.spent = ZERO
        self.reserved = ZERO

    @property
    def available(self) -> Decimal:
        return self.budget - self.spent - self.reserved

    def reserve(self, prompt_bytes: int, output_tokens: int) -> Reservation | None:
        """Hold the worst case of one attempt, or None when it does not fit."""
        amount = worst_case_usd(self.price, prompt_bytes, output_tokens)
        if amount > self.available:
            return None
        self.reserved += amount
        return Reservation(amount)

    def settle(self, reservation: Reservation, *, usage: Usage | None, billable: bool) -> Decimal:
        """Close a reservation; returns what the attempt is accounted at.

        ``usage`` known: its cost. Unknown and ``billable`` (a response or a
        timeout whose billing we cannot see): the whole reservation, no refund.
        Unknown and not billable (never reached the provider, or an error status):
        nothing.
        """
        self.reserved -= reservation.amount
        if usage is not None:
            charged = usage.cost(self.price)
        elif billable:
            charged = reservation.amount
        else:
            charged = ZERO
        self.spent += charged
        return charged
