"""The spec's JSON Schema as text: exactly as committed in schema.json."""

from __future__ import annotations

import json

from reconciler.spec import json_schema


def schema_text() -> str:
    """The JSON Schema exactly as committed in schema.json (stable order, final newline)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
