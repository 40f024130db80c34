"""After a generation: go on with this lineage, or stop it? Pure; the one home of the rule.

The kernel records, the control plane decides (seed 004: the normalized failure
observation feeds the continuation decision). A generation's observation
carries ``provider_failure`` (``reconciler.kernel.base.failures``) and
``usage_exceeds_request``; from them and the run of failed generations before
it, ``decide`` says whether apply stops the lineage, why, and what a human
should do. Stopping a lineage never stops the others, and never undoes the
generations that ran: they are history.

    final failure (auth, permission, quota, unknown model, invalid request)
                                        -> stop after this generation
    usage above what the request could cost -> stop (the spend is recorded as reported)
    K generations in a row whose every call failed (K = max_failed_generations)
                                        -> stop

Before the next generation (``probe_first``): when the last one had every call
fail with a retryable error, apply probes the provider (``engine.provider_check``, even
under --no-provider-check) and, if it does not answer, stops the lineage there
(``provider_unavailable``) instead of spending a generation on an outage. A
replay lineage whose folder has no reply left for the next generation (the
replies its generations used, recorded as ``replay_cursor``, are all there are)
stops there too (``replay_exhausted``), before that generation runs, until
replies are added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.kernel.base.failures import STOPPING_CODES, failed_every_call

__all__ = ["PROVIDER_UNAVAILABLE", "REPLAY_EXHAUSTED", "Stop", "decide", "failure_note",
           "probe_first", "provider_unavailable", "replay_exhausted"]

PROVIDER_UNAVAILABLE = "provider-unavailable"
REPLAY_EXHAUSTED = "replay-exhausted"


@dataclass(frozen=True)
class Stop:
    """Apply stops the lineage: ``code`` for the record, ``message`` says why and the remedy."""

    code: str  # the failure code, usage-exceeds-request, failed-generations,
    # provider-unavailable or replay-exhausted
    message: str


def _status(failure: Mapping[str, Any]) -> str:
    status = failure.get("http_status")
    return f"HTTP {status}" if isinstance(status, int) else str(failure.get("code"))


def _remedy(code: str, variable: str | None, model: str) -> str:
    """``variable``: the key variable whose key the requests carried; None when they carried
    no key (a key that was not sent is never named)."""
    key = f"the key in {variable}" if variable else "a request without a key"
    return {
        "auth": f"the provider refused the key in {variable}: set {variable} to a valid key"
                if variable else "the provider wants a key and none was sent: name its "
                "variable in spec.model.api_key_env and set it",
        "permission": f"{key} may not use model {model!r}: use a key with access to it, "
                      "or another model",
        "quota": (f"the account behind {key} has no quota or credit left: add credit or "
                  "raise its limit") if variable else "the provider reports no quota or credit "
                 "left: add credit or raise its limit",
        "unknown_model": f"the provider does not know model {model!r}: fix spec.model.name",
        "invalid_request": "the provider refused the request as invalid: check spec.model "
                           "(name, max_output_tokens, base_url)",
    }.get(code, "check the provider")


def decide(failure: Mapping[str, Any] | None, usage_exceeds_request: bool, *,
           failed_in_a_row: int, max_failed: int, variable: str | None,
           model: str) -> Stop | None:
    """Stop the lineage after this generation? ``failed_in_a_row`` counts it; ``variable``
    names the key variable only when the generation's requests carried its key."""
    if failure and failure.get("stops_lineage") is True \
            and failure.get("code") in STOPPING_CODES:
        code = str(failure["code"])
        return Stop(code, f"model unavailable ({_status(failure)}, {code}): "
                          f"{_remedy(code, variable, model)}, then run apply again")
    if usage_exceeds_request:
        return Stop("usage-exceeds-request",
                    "the provider reported more usage than the request could have cost "
                    "(recorded as reported, flagged in the observation): check the "
                    "provider and base_url before spending more, then run apply again")
    if failure and failed_every_call(failure) and failed_in_a_row >= max_failed:
        return Stop("failed-generations",
                    f"{failed_in_a_row} generation{'s' * (failed_in_a_row != 1)} in a row had "
                    "every model call fail "
                    f"(last: {failure.get('code')}, {_status(failure)}; max_failed_generations "
                    f"{max_failed}): check that the provider is up and reachable, then run "
                    "apply again")
    return None


def probe_first(failure: Mapping[str, Any] | None) -> bool:
    """Did every model call of the last generation fail with a retryable error (an outage,
    a refused connection, 5xx)? Then the provider is probed before the next one starts."""
    return failure is not None and failed_every_call(failure) \
        and failure.get("retryable") is True


def provider_unavailable(number: int, failure: Mapping[str, Any], found: str,
                         remedy: str) -> Stop:
    """The stop before generation ``number + 1``: the probe after generation ``number``
    (whose every call failed) found the provider still unavailable."""
    return Stop(PROVIDER_UNAVAILABLE,
                f"every model call of gen {number} failed ({failure.get('code')}, "
                f"{_status(failure)}) and the provider still does not answer ({found}): "
                f"{remedy or 'check that the provider is up and reachable'}; nothing more was "
                "run, then run apply again")


def replay_exhausted(number: int, failure: Mapping[str, Any] | None, folder: str,
                     replies: int, used: int | None) -> Stop | None:
    """The stop before generation ``number + 1`` of a replay lineage whose folder has no
    reply left for it: the ``used`` replies (through generation ``number``; 0 before the
    first) are all there are. Checked before the generation starts, so none is spent on
    a reply that is not there. Where ``used`` is unknown (an observation written without
    ``replay_cursor``), generation ``number`` asking for a reply it did not get says so."""
    asked = failure is not None and failure.get("code") == "replay_exhausted" \
        and failure.get("reason") == "replay_exhausted"
    if used is None and not asked:
        return None
    if used is not None and used < replies:
        return None
    have = (f"has {replies} repl{'y' if replies == 1 else 'ies'}, all used"
            + (f" by gen {number}" if number else "")) if replies else "has no replies"
    why = f" (gen {number} asked for another)" if asked else ""
    return Stop(REPLAY_EXHAUSTED,
                f"replay folder {folder} {have}; generation {number + 1} has none{why}: "
                "add replies to the folder or lower spec.generations, then run apply again")


def failure_note(number: int, failure: Mapping[str, Any] | None) -> str | None:
    """The plan's note about the last generation's model failure, if it had one."""
    if not failure:
        return None
    message = failure.get("message") or "model unavailable"
    code = failure.get("code")
    retry = "retryable" if failure.get("retryable") else "final"
    then = (f"; apply probes the provider before gen {number + 1} and stops the lineage if it "
            "does not answer") if probe_first(failure) else ""
    if failure.get("reason") == "replay_exhausted":
        then = (f"; the replay folder has no reply for gen {number + 1}: apply stops the "
                "lineage until replies are added")
    return f"gen {number}: {message}: {code}, {retry}{then}"
