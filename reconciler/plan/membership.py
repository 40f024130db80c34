"""A set member never takes over a lineage born outside its set. Pure.

Rule: every generation ouro runs records, in its observation's ``ran_with``, the
LineageSet its spec was a member of (``MEMBERSHIP_KEY``: the set's name, or null for a
plain Lineage). A set member whose lineage's newest observation records another set, or
none (a plain Lineage of the same name), is refused (``set-membership``) naming the
remedy: the member and the lineage only share a name. A lineage whose observations
predate the record (no key) is not judged: nothing says where it was born.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["MEMBERSHIP_KEY", "SET_REASONS", "SetReason", "membership_refusal"]

MEMBERSHIP_KEY = "set"  # in each observation's ``ran_with``
SetReason = Literal["set-membership"]
SET_REASONS: tuple[SetReason, ...] = ("set-membership",)


def membership_refusal(name: str, set_name: str | None,
                       last_observation: Mapping[str, Any] | None
                       ) -> tuple[SetReason, str] | None:
    """Why member ``name`` of set ``set_name`` may not extend the lineage it names (None:
    it may; ``set_name`` None: no member, never refused here)."""
    ran_with = (last_observation or {}).get("ran_with")
    if set_name is None or not isinstance(ran_with, Mapping) or MEMBERSHIP_KEY not in ran_with:
        return None
    recorded = ran_with[MEMBERSHIP_KEY]
    if recorded == set_name:
        return None
    born = (f"in set {str(recorded)[:63]!r}" if isinstance(recorded, str)
            else "as a plain Lineage")
    return "set-membership", (
        f"lineage {name}: set {set_name!r} names a member {name}, but the lineage of that name "
        f"ran {born}, outside this set: a member never takes it over; rename the set "
        f"(metadata.name) or the lineage (its own spec's metadata.name, or storage.path), "
        "then plan again")
