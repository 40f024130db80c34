"""No function in reconciler/ is longer than 80 lines unless its docstring says why.

A long function's docstring must say "Longer than 80 lines because ..." and give the
reason; everything else is split.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "reconciler"
LIMIT = 80
REASON = re.compile(r"longer than 80 lines because\s+\S.{20,}", re.IGNORECASE | re.DOTALL)


def long_functions(root: Path = PACKAGE) -> list[tuple[str, int, bool]]:
    """(place, lines, has a reason) of every function over the limit under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > LIMIT:
                    reason = bool(REASON.search(ast.get_docstring(node) or ""))
                    where = f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"
                    found.append((where, lines, reason))
    return found


def test_no_long_function_without_a_reason() -> None:
    offenders = [f"{where} ({lines} lines)" for where, lines, reason in long_functions()
                 if not reason]
    assert not offenders, (
        f"functions over {LIMIT} lines whose docstring does not say why "
        "('Longer than 80 lines because ...'): split them or say why:\n  "
        + "\n  ".join(offenders))


def test_the_check_finds_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        f"def short():\n    pass\n\n\ndef long():\n{body}\n\n\n"
        f'def excused():\n    """Longer than 80 lines because the table reads best whole.'
        f'"""\n{body}\n')
    found = {where.split()[-1]: reason for where, _, reason in long_functions(tmp_path / "pkg")}
    assert found == {"long": False, "excused": True}
