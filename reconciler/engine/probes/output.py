"""A probe's stdout -> its metrics, or the reason it is not one.

Rule: a probe prints exactly one JSON object of metrics: at most ``MAX_METRICS``
names (``METRIC_NAME``), each a finite number, a boolean or a short string without
control characters. The bytes are bounded before they are read (``MAX_OUTPUT``);
anything else is a failure with a reason a researcher can act on, never an
exception.
"""

from __future__ import annotations

import json
import math
from typing import Any

from reconciler.spec.names import METRIC_NAME, whole

__all__ = ["MAX_METRICS", "MAX_OUTPUT", "MAX_STRING", "Metric", "parse_metrics"]

MAX_OUTPUT = 64 << 10  # bytes of stdout read; beyond, the probe is stopped and fails
MAX_METRICS = 256
MAX_STRING = 256
_MAX_NUMBER = 1e300  # a float beyond this is a unit mistake, not a measurement
Metric = float | int | bool | str


class _Refused(ValueError):
    pass


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a finite number")


def _value(name: str, value: Any) -> Metric:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > 2**63:
            raise _Refused(f"metric {name!r} is an integer beyond 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) > _MAX_NUMBER:
            raise _Refused(f"metric {name!r} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise _Refused(f"metric {name!r} is a string longer than {MAX_STRING} characters "
                           "or with control characters")
        return value
    kind = "null" if value is None else type(value).__name__.replace("dict", "object").replace(
        "list", "array")
    raise _Refused(f"metric {name!r} is {kind}: a metric is a number, a boolean or a string")


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
    except _Refused as error:
        return None, f"stdout is not valid: {error}"
    except RecursionError:
        return None, "stdout is JSON nested too deeply"
    except ValueError as error:
        return None, f"stdout is not one JSON object ({str(error)[:120]})"
    if not isinstance(document, dict):
        return None, "stdout is JSON but not an object of metrics"
    if len(document) > MAX_METRICS:
        return None, f"stdout has {len(document)} metrics; at most {MAX_METRICS}"
    metrics: dict[str, Metric] = {}
    try:
        for name, value in document.items():
            if not whole(METRIC_NAME, name):
                raise _Refused(f"{name[:80]!r} is not a metric name (letters, digits, '_', "
                               "'.', '-'; at most 64)")
            metrics[name] = _value(name, value)
    except _Refused as error:
        return None, str(error)
    return metrics, None
