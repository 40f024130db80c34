"""Text a spec, a path, a model or an organism controls, made inert for where it goes.

Rule: this is the one home of escaping for ouro's outputs. Every text shown on a
terminal passes ``terminal`` (or ``rich_text`` when rich prints it); every text put
into Markdown passes ``markdown`` (or ``markdown_code`` inside a code span). HTML
pages are escaped by Jinja's autoescape (``reconciler.viewer``); a JSON
document (``json.dumps`` escapes C0 only) passes ``json_text``, which writes DEL, the
C1 controls and the bidi overrides as ``\\u`` escapes too: the same document, inert on
a terminal.

- ``terminal``: C0 control characters but newline and tab (ESC, BEL, CR, backspace,
  ...), DEL, the C1 controls (U+0080..U+009F: U+009B is a CSI to an 8-bit terminal)
  and the bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069: they
  reorder what a reader sees) are shown as ``\\xNN`` / ``\\uNNNN``: they can neither
  drive the terminal nor disguise a line.
- ``markdown``: for a table cell of one line. HTML's ``< > &`` become entities (so
  ``<!--``, ``<script>`` and ``<http://...>`` are text; a backslash would not stop
  GitHub's HTML); the inline punctuation of CommonMark and GitHub (backslash, backtick,
  ``* [ ] ~ | $``, an ``_`` at a word's edge: escapes, code, emphasis, links, images,
  strikethrough, cells, math) is backslash-escaped; every line break (a CR too: it
  ends a line in CommonMark, and a line that starts with ``<!--`` opens an HTML block
  that hides what follows) becomes a space. What is left (``:``, ``.``, ``-``, ``'``)
  means nothing inside a cell, so messages read as they were written. A plain URL may
  still be autolinked: its text is shown as it is.
"""

from __future__ import annotations

import re

__all__ = ["json_text", "markdown", "markdown_code", "rich_text", "terminal"]

_TERMINAL = {
    **{code: f"\\x{code:02x}" for code in (*range(0, 9), *range(11, 32), 127)},
    **{code: f"\\x{code:02x}" for code in range(0x80, 0xA0)},
    **{code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}

# HTML's three, as entities, then the inline punctuation, backslash-escaped (CommonMark:
# any ASCII punctuation may be), then line breaks: see the module rule.
_MARKDOWN = {
    ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;",
    **{ord(c): "\\" + c for c in "\\`*[]~|$"},
    ord("\n"): " ", ord("\r"): " ", ord("\t"): " ", 0x85: " ", 0x2028: " ", 0x2029: " ",
}


def terminal(text: str) -> str:
    """``text`` with every control character but newline and tab made visible."""
    return text.translate(_TERMINAL)


# Inside a JSON document these can only be in strings, where \\uXXXX means the same.
_JSON = {code: f"\\u{code:04x}" for code in (127, *range(0x80, 0xA0), *range(0x202A, 0x202F),
                                            *range(0x2066, 0x206A))}


def json_text(document: str) -> str:
    """A JSON document (from ``json.dumps``) with every control character escaped."""
    return document.translate(_JSON)


def rich_text(text: str) -> str:
    """``terminal(text)`` with rich's markup (``[bold]``) escaped too, for ``console.print``."""
    from rich.markup import escape

    return escape(terminal(text))


# An underscore inside a word never starts emphasis (CommonMark's flanking rules): only
# one at a word's edge is escaped, so that OPENAI_API_KEY reads as it is.
_EDGE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def markdown(text: object) -> str:
    """``text`` as literal Markdown inline text (one line; HTML, links, emphasis inert)."""
    return _EDGE_UNDERSCORE.sub(r"\\_", terminal(str(text)).translate(_MARKDOWN))


def markdown_code(text: object) -> str:
    """``text`` as a code span; a text a code span cannot hold literally is plain escaped text.

    A code span shows its content verbatim, so only a backtick, a pipe (GitHub splits
    table cells first) or a line break could break out: such a text is escaped instead.
    """
    shown = terminal(str(text))
    if any(c in shown for c in "`|\n\r") or not shown.strip():
        return markdown(shown)
    return f"`{shown}`"
