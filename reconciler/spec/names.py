"""Every name a spec may hold, as one pattern each: the one home of the name rules.

Rule: a name matches its pattern WHOLE (``whole``: ``re.fullmatch``), never by
``match``/``search`` with ``$``, which in Python also matches before a final
newline (``"gpt-03\\n"`` would pass, break plan text and the log header, and be
refused late, in the kernel). Each pattern is written with ``^...$`` so that the
same text serves editors as a JSON Schema (ECMA-262) ``pattern``, where ``$`` is
the end of the text; Python code never applies it but through ``whole``.
"""

from __future__ import annotations

import re

__all__ = [
    "DNS_LABEL",
    "ENV_NAME",
    "LABEL_KEY",
    "LABEL_VALUE",
    "MATRIX_KEY",
    "METRIC_NAME",
    "MODEL_NAME",
    "NAME_PATTERNS",
    "PROBE_NAME",
    "SBATCH_OPTION",
    "SLURM_NAME",
    "URL",
    "WORDS",
    "whole",
]

# a lineage's metadata.name, a fork's parent (from.lineage), a set's name
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
PROBE_NAME = DNS_LABEL
LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$")
# a label's value: free text on one line (no control character, no line or paragraph
# separator), at most 256 characters
LABEL_VALUE = re.compile(r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]{0,256}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MODEL_NAME = re.compile(r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]{1,200}$")
METRIC_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
MATRIX_KEY = re.compile(r"^[a-z_]+(\.[a-z_]+)*$")
SBATCH_OPTION = re.compile(r"^--([a-z][a-z0-9-]*)(=[^\x00-\x1f\x7f-\x9f\u2028\u2029]*)?$")
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,128}$")
# For editors: an http(s) URL with a host, no credentials, query, fragment or whitespace
# (the validator, urlsplit, rules).
URL = re.compile(
    r"^[Hh][Tt][Tt][Pp][Ss]?://(\[[0-9A-Fa-f:.]+\]|[^\s/?#@:\[\]]+)"
    r"(:[0-9]*)?(/[^\s?#]*)?$"
)

NAME_PATTERNS: dict[str, re.Pattern[str]] = {
    "DNS_LABEL": DNS_LABEL, "LABEL_KEY": LABEL_KEY, "LABEL_VALUE": LABEL_VALUE,
    "ENV_NAME": ENV_NAME, "MODEL_NAME": MODEL_NAME, "METRIC_NAME": METRIC_NAME,
    "MATRIX_KEY": MATRIX_KEY, "SBATCH_OPTION": SBATCH_OPTION, "SLURM_NAME": SLURM_NAME,
    "URL": URL,
}

# Each pattern in words, for an error message (a person reads these, not the regex).
WORDS: dict[str, str] = {
    DNS_LABEL.pattern: "lower-case letters, digits and '-', starting and ending with a "
    "letter or digit, at most 63 characters",
    LABEL_KEY.pattern: "letters, digits, '.', '_', '/' and '-', starting and ending with a "
    "letter or digit, at most 63 characters",
    LABEL_VALUE.pattern: "one line of at most 256 characters, no control characters",
    ENV_NAME.pattern: "letters, digits and '_', not starting with a digit",
    MODEL_NAME.pattern: "one line of 1 to 200 characters, no control characters",
    METRIC_NAME.pattern: "letters, digits, '_', '.' and '-', starting with a letter, digit "
    "or '_', at most 64 characters",
    MATRIX_KEY.pattern: "lower-case words of letters and '_', joined by '.'",
    SBATCH_OPTION.pattern: "one long option, --name or --name=value, on one line",
    SLURM_NAME.pattern: "letters, digits, '_', '.', '+' and '-', 1 to 128 characters",
    URL.pattern: "an http:// or https:// URL with a host, no credentials, query or fragment",
}


def whole(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """``pattern`` matched against all of ``text`` (a final newline is not ignored)."""
    return pattern.fullmatch(text)
