"""What a probe record may hold: the one home of the rules its writer keeps and its readers
check.

Rule: a record on ``probes/<lineage branch>`` is anyone's who can write the observation
repository, so it is believed only when it holds what ouro's own writer could have
written. The writer (``engine.probes``: a probe's stdout parsed by
``output.parse_metrics``, the record made by ``measure``) refuses whatever these rules
refuse, and the readers (``state.probes.records``: ``until``, selection, ``compare``,
``log``, ``show``, the export and the viewer) see only records that pass
``record_problem``; ``ouro verify`` names each one that does not, with the rule.

- ``probe``: a probe name (``spec.names.PROBE_NAME``, the whole string);
- ``metrics`` (when ``failure`` is null): an object of at most ``MAX_METRICS`` metric
  names (``spec.names.METRIC_NAME``, the whole string), each a finite number (at most
  ``MAX_NUMBER`` in size; an integer within 64 bits), a boolean or a string of at most
  ``MAX_STRING`` characters without control characters;
- ``outcome``: ``measured`` (``metrics`` holds them) or ``failed`` (``failure`` says why,
  ``stderr_tail`` in the probe's words): what tells a failed probe from one not measured
  (no record) in the export; absent in records an older ouro wrote, where ``failure``
  alone says it (``outcome_of``);
- ``failure``: null, or text of at most ``MAX_FAILURE`` characters;
- ``stderr_tail``: text, the end of what the probe wrote to stderr: the writer keeps its
  last ``STDERR_TAIL`` characters with control characters but newline and tab replaced
  (``printable_tail``); a reader accepts up to ``MAX_STDERR_TAIL`` of any characters (an
  older writer kept as many, unreplaced) and escapes them when it shows them;
- ``exit``, ``wall_ms``, ``cpu_ms``, ``peak_memory_bytes``: null or a non-negative integer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from reconciler.spec.names import METRIC_NAME, PROBE_NAME, whole

__all__ = [
    "MAX_FAILURE",
    "MAX_METRICS",
    "MAX_NUMBER",
    "MAX_STDERR_TAIL",
    "MAX_STRING",
    "RULES",
    "STDERR_TAIL",
    "Metric",
    "Refused",
    "check_metrics",
    "metric_value",
    "outcome_of",
    "printable_tail",
    "record_problem",
]

MAX_METRICS = 256
MAX_STRING = 256
MAX_NUMBER = 1e300  # a float beyond this is a unit mistake, not a measurement
MAX_FAILURE = 1024
STDERR_TAIL = 4096  # characters of a probe's stderr kept in its record (its end: an Emacs
# backtrace puts its error first, a few KiB above the end)
MAX_STDERR_TAIL = 4096
Metric = float | int | bool | str
_COUNTS = ("exit", "wall_ms", "cpu_ms", "peak_memory_bytes")


# The rules a record can break, each with what it protects (``ouro verify``'s finding
# ``probe-record-<rule>`` says it).
RULES: Mapping[str, str] = {
    "name": "a probe record's probe name is not one ouro writes (lower-case letters, digits "
            "and '-', at most 63)",
    "metric-name": "a probe record holds a metric name ouro's writer refuses (letters, "
                   "digits, '_', '.', '-'; at most 64)",
    "number": "a probe record holds a number ouro's writer refuses (NaN, Infinity, beyond "
              "1e300 or 64 bits, or a count that is not a non-negative integer)",
    "size": "a probe record holds more metrics, or longer text, than ouro's writer keeps",
    "kind": "a probe record holds a value of a kind ouro's writer never records",
}


class Refused(ValueError):
    """A value ouro's writer never records: ``rule`` (one of ``RULES``) says which rule."""

    def __init__(self, message: str, rule: str = "kind") -> None:
        super().__init__(message)
        self.rule = rule


def _controls(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def metric_value(name: str, value: Any) -> Metric:
    """``value`` if a metric may hold it; ``Refused`` naming the rule otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > 2**63:
            raise Refused(f"metric {name!r} is an integer beyond 64 bits", "number")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) > MAX_NUMBER:
            raise Refused(f"metric {name!r} is not a finite number", "number")
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING or _controls(value):
            raise Refused(f"metric {name!r} is a string longer than {MAX_STRING} characters "
                          "or with control characters", "size")
        return value
    kind = "null" if value is None else type(value).__name__.replace("dict", "object").replace(
        "list", "array")
    raise Refused(f"metric {name!r} is {kind}: a metric is a number, a boolean or a string")


def check_metrics(document: Any) -> dict[str, Metric]:
    """The metrics of ``document`` (an object of them); ``Refused`` naming the rule."""
    if not isinstance(document, dict):
        raise Refused("the metrics are not an object")
    if len(document) > MAX_METRICS:
        raise Refused(f"{len(document)} metrics; at most {MAX_METRICS}", "size")
    metrics: dict[str, Metric] = {}
    for name, value in document.items():
        if not isinstance(name, str) or not whole(METRIC_NAME, name):
            shown = str(name)[:80]
            raise Refused(f"{shown!r} is not a metric name (letters, digits, '_', '.', '-'; "
                          "at most 64)", "metric-name")
        metrics[name] = metric_value(name, value)
    return metrics


def printable_tail(data: bytes) -> str:
    """The last ``STDERR_TAIL`` characters of ``data`` as text: invalid UTF-8 replaced, and
    every control character but newline and tab shown as U+FFFD."""
    text = data.decode("utf-8", "replace")[-STDERR_TAIL:]
    return "".join(c if c in "\n\t" or not (ord(c) < 32 or ord(c) == 127) else "\ufffd"
                   for c in text)


def _text_problem(record: Mapping[str, Any], key: str, limit: int, *,
                  controls: bool = False) -> tuple[str, str] | None:
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        return "kind", f"{key} is not text"
    if len(value) > limit or (not controls and _controls(value)):
        return "size", (f"{key} is not text of at most {limit} characters"
                        + ("" if controls else " without control characters"))
    return None


def outcome_of(record: Mapping[str, Any]) -> str:
    """``measured`` or ``failed``: what the record's ``failure`` says (its ``outcome``
    field, written since issue 41, must agree)."""
    return "measured" if record.get("failure") is None else "failed"


def record_problem(record: Any) -> tuple[str, str] | None:
    """The first of the module's rules ``record`` breaks, as (rule, why): ``rule`` one of
    ``RULES``; None: it passes."""
    if not isinstance(record, dict):
        return "kind", "the record is not a JSON object"
    name = record.get("probe")
    if not isinstance(name, str) or not whole(PROBE_NAME, name):
        return "name", "its probe name is not one (lower-case letters, digits, '-'; at most 63)"
    for key in _COUNTS:
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value <= 2**63):
            return "number", f"{key} is not a non-negative integer"
    found = (_text_problem(record, "failure", MAX_FAILURE)
             or _text_problem(record, "stderr_tail", MAX_STDERR_TAIL, controls=True))
    if found is not None:
        return found
    if "outcome" in record and record["outcome"] != outcome_of(record):
        return "kind", "its outcome is not what its failure says"
    if record.get("failure") is None:
        try:
            check_metrics(record.get("metrics"))
        except Refused as error:
            return error.rule, f"metrics: {error}"
    elif record.get("metrics") is not None:
        return "kind", "a failure's record holds metrics"
    return None
