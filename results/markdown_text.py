"""Names and messages from run records, made safe for markdown: a record cannot add a table row, a heading, a link
or HTML to `lra.md` (`lra.tex` and `index.html` escape in their own way)."""

from __future__ import annotations

MARKDOWN_SPECIAL = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", **{c: "\\" + c for c in "\\`*[]|"}})


def md_text(value: object) -> str:
    """A name or message from a record as inline markdown text: one line, no table cell break (|), no HTML, no
    bold or link syntax; renders as the original characters (an underscore inside a word stays as it is)."""
    return " ".join(str(value).split()).translate(MARKDOWN_SPECIAL)


def md_code(value: object) -> str:
    """A name from a record inside a code span: one line, and no backtick that would close the span."""
    return " ".join(str(value).split()).replace("`", "'")
