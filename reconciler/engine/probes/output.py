"""A probe's stdout -> its metrics, or the reason it is not one.

Rule: a probe prints exactly one JSON object of metrics, by the rules of
``reconciler.state.probe_rules`` (their one home, which ``ouro verify`` and every reader
check a stored record by): at most ``MAX_METRICS`` names, each a finite number, a
boolean or a short string without control characters. The bytes are bounded before
they are read (``MAX_OUTPUT``); anything else is a failure with a reason a researcher
can act on, never an exception.
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.state.probe_rules import MAX_METRICS, MAX_STRING, Metric, Refused, check_metrics

__all__ = ["MAX_METRICS", "MAX_OUTPUT", "MAX_STRING", "Metric", "parse_metrics"]

MAX_OUTPUT = 64 << 10  # bytes of stdout read; beyond, the probe is stopped and fails


def _constant(name: str) -> Any:
    raise Refused(f"{name} is not a finite number")


def parse_metrics(stdout: bytes) -> tuple[dict[str, Metric] | None, str | None]:
    """(metrics, None) or (None, why not)."""
    if len(stdout) > MAX_OUTPUT:
        return None, f"stdout is longer than {MAX_OUTPUT} bytes"
    try:
        text = stdout.decode("utf-8")
    except UnicodeDecodeError:
        return None, "stdout is not UTF-8"
    if not text.strip():
        return None, "stdout is empty: a probe prints one JSON object of metrics"
    try:
        document = json.loads(text, parse_constant=_constant)
    except Refused as error:
        return None, f"stdout is not valid: {error}"
    except RecursionError:
        return None, "stdout is JSON nested too deeply"
    except ValueError as error:
        return None, f"stdout is not one JSON object ({str(error)[:120]})"
    if not isinstance(document, dict):
        return None, "stdout is JSON but not an object of metrics"
    if len(document) > MAX_METRICS:
        return None, f"stdout has {len(document)} metrics; at most {MAX_METRICS}"
    try:
        return check_metrics(document), None
    except Refused as error:
        return None, str(error)
