"""The per-generation table as CSV, JSON lines and JSON: `ouro export`'s formats.

Rule: no decisions here, and no parsing. The table (``reconciler.state.table``) is
typed; each format writes every column of ``GenerationTable.columns`` for every row,
an unknown value as an empty cell (CSV) or ``null`` (JSON). CSV writes booleans as
``True``/``False`` and a matrix value that is a mapping or a list as compact JSON;
JSON keeps every value as itself (``spend_usd`` is decimal text in every format).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from reconciler.report.escape import json_text
from reconciler.report.sets import matrix_value
from reconciler.state.table import GenerationTable, TableRow

__all__ = ["EXPORT_FORMATS", "csv_cell", "export_text", "row_document"]

EXPORT_FORMATS = ("csv", "jsonl", "json")


def row_document(row: TableRow, columns: tuple[str, ...]) -> dict[str, Any]:
    """One row as a JSON object: every column, ``null`` when unknown."""
    return row.as_dict(columns)


def csv_cell(value: Any) -> Any:
    """A value in a CSV cell: unknown empty, a mapping or a list as compact JSON."""
    if value is None:
        return ""
    return matrix_value(value) if isinstance(value, dict | list) else value


def _dumps(document: Any, **options: Any) -> str:
    return json_text(json.dumps(document, ensure_ascii=False, default=str, **options))


def export_text(table: GenerationTable, fmt: str) -> str:
    """The table in ``fmt`` (one of ``EXPORT_FORMATS``): ``csv`` (a header line, then a
    line per row), ``jsonl`` (an object per line) or ``json`` (one array of objects)."""
    columns = table.columns
    if fmt == "jsonl":
        return "".join(_dumps(row_document(row, columns)) + "\n" for row in table.rows)
    if fmt == "json":
        return _dumps([row_document(row, columns) for row in table.rows], indent=1) + "\n"
    if fmt != "csv":
        raise ValueError(f"{fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in table.rows:
        writer.writerow([csv_cell(row.value(column)) for column in columns])
    return buffer.getvalue()
