"""The leaderboard page's frame: inline CSS, the vanilla-JS column sorter, the HTML skeleton and table markup.

Everything from a record goes through `esc` (`html.escape`); the page's Content-Security-Policy allows only its own
inline style and script (by hash), images beside it and no network at all.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
import re
from dataclasses import dataclass
from urllib.parse import quote

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f; margin: 0;
       background: #fafafa; }
main { max-width: 1180px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 1.6em; margin: 0.4em 0 0.2em; }
h2 { border-bottom: 2px solid #d0d4da; padding-bottom: 4px; margin-top: 2em; }
h3 { margin: 1.4em 0 0.4em; }
code { background: #eef0f3; padding: 0 3px; border-radius: 3px; font-size: 0.92em; }
nav { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 8px 12px; margin: 12px 0; }
nav a { margin-right: 10px; white-space: nowrap; }
.protocol { color: #444; margin: 0.2em 0 0.6em; }
.notes { color: #444; font-size: 0.93em; }
.table-scroll { overflow-x: auto; max-width: 100%; margin: 6px 0 12px; }
table { border-collapse: collapse; background: #fff; margin: 0; font-size: 0.95em; }
th, td { border: 1px solid #dde1e6; padding: 3px 8px; }
th { background: #eef1f5; text-align: left; user-select: none; }
table.sortable th { cursor: pointer; }
table.sortable th:hover { background: #e0e6ee; }
th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: 0.8em; }
th[aria-sort="descending"]::after { content: " \\25BC"; font-size: 0.8em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.best { font-weight: 700; }
td.up { color: #17692c; }
td.down { color: #a3261c; }
tfoot td { color: #555; font-style: italic; }
figure { margin: 8px 0 16px; }
figure img { max-width: min(100%, 760px); border: 1px solid #dde1e6; background: #fff; }
td a { white-space: nowrap; }
details.notes { margin: 0 0 8px; }
figcaption { color: #555; font-size: 0.9em; }
.run { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 4px 14px 10px; margin: 12px 0; }
.run:target { border-color: #3b6fd8; box-shadow: 0 0 0 2px #c9d8f7; }
.run .facts { display: flex; flex-wrap: wrap; gap: 8px 28px; align-items: flex-start; }
.run .facts img { max-width: 460px; }
.run dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; }
.run dt { color: #555; }
.run dd { margin: 0; word-break: break-all; }
h2, h3, p, li, summary, figcaption { overflow-wrap: break-word; }
pre { background: #f3f4f6; padding: 8px; overflow-x: auto; max-height: 420px; font-size: 0.88em; }
"""

JS = """
"use strict";
function sortKey(cell) {
  if (!cell) return null;
  const text = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
  return text === "" ? null : text;
}
function sortTable(table, header) {
  const column = Array.prototype.indexOf.call(header.parentNode.children, header);
  const numeric = header.getAttribute("data-type") === "number";
  const current = header.getAttribute("aria-sort");
  const ascending = current ? current === "descending" : !numeric;  // numbers: highest first
  for (const th of table.tHead.rows[0].cells) th.removeAttribute("aria-sort");
  header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const body = table.tBodies[0];
  const rows = Array.from(body.rows, (row, index) => ({row, index, key: sortKey(row.cells[column])}));
  const sign = ascending ? 1 : -1;
  rows.sort((a, b) => {
    if (a.key === null || b.key === null) return (a.key === null) - (b.key === null) || a.index - b.index;
    const order = numeric ? Number(a.key) - Number(b.key) : a.key.localeCompare(b.key, "en", {numeric: true});
    return sign * order || a.index - b.index;
  });
  for (const item of rows) body.appendChild(item.row);
}
for (const table of document.querySelectorAll("table.sortable")) {
  for (const th of table.tHead.rows[0].cells) {
    th.tabIndex = 0;
    th.title = "sort";
    th.addEventListener("click", () => sortTable(table, th));
    th.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sortTable(table, th); }
    });
  }
}
"""


def esc(value: object) -> str:
    """Text from a record, safe inside an element or a quoted attribute."""
    return html.escape(str(value), quote=True)


def code_spans(text: object, link=None) -> str:
    """Escaped text with its markdown code spans (`like this`) as <code>; a backtick without a partner is dropped.

    `link(content)`, when given, returns the href (or None) for a code span's text, e.g. a record path's run block.
    """
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: the last one has no partner
        parts[-2:] = [parts[-2] + parts[-1]]
    shown = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            shown.append(esc(part))
            continue
        href = link(part) if link else None
        shown.append(f'<code><a href="{esc(href)}">{esc(part)}</a></code>' if href else f"<code>{esc(part)}</code>")
    return "".join(shown)


def inline(text: str) -> str:
    """Escaped text with the markdown notes' `code` and **bold** spans rendered."""
    escaped = esc(text)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def csp_hash(source: str) -> str:
    """A CSP source expression allowing exactly this inline style or script."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii") + "'"


def page(title: str, body: str) -> str:
    """The whole document around `body` (already HTML): no external resource, no connection allowed."""
    policy = (f"default-src 'none'; img-src 'self' file:; style-src {csp_hash(CSS)}; script-src {csp_hash(JS)}; "
              "base-uri 'none'; form-action 'none'")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{esc(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>", "<main>", body, "</main>",
        f"<script>{JS}</script>", "</body>", "</html>", ""])


@dataclass(frozen=True)
class Cell:
    """One table cell: its HTML, the key the sorter uses (None: the shown text) and CSS classes."""

    html: str
    sort: str | None = None
    cls: str = ""


def text(value: object, cls: str = "") -> Cell:
    """A cell showing escaped text."""
    return Cell(esc(value), None, cls)


def number(shown: str, value: object, cls: str = "") -> Cell:
    """A right-aligned cell showing `shown` and sorted by `value` (blank when missing or not finite)."""
    try:
        key = repr(float(value)) if value is not None and not isinstance(value, (bool, str)) else ""
    except (TypeError, ValueError):  # pd.NA and other blanks
        key = ""
    return Cell(esc(shown), key if key and math.isfinite(float(key)) else "", f"num {cls}".strip())


def table(table_id: str, header: list[tuple[str, str]], rows: list[list[Cell]], foot: list[list[Cell]] = (),
          caption: str = "") -> str:
    """A sortable table in its own horizontally scrolling box (a wide table never widens the page): `header` is
    (label, "number" | "text") per column; `foot` rows never move."""
    def row_html(cells):
        parts = []
        for c in cells:
            attrs = (f' class="{esc(c.cls)}"' if c.cls else "") + (f' data-sort="{esc(c.sort)}"' if c.sort is not None
                                                                   else "")
            parts.append(f"<td{attrs}>{c.html}</td>")
        return "<tr>" + "".join(parts) + "</tr>"
    heads = "".join(f'<th scope="col" data-type="{kind}">{esc(label)}</th>' for label, kind in header)
    lines = ['<div class="table-scroll">', f'<table class="sortable" id="{esc(table_id)}">']
    if caption:
        lines.append(f"<caption>{caption}</caption>")
    lines += [f"<thead><tr>{heads}</tr></thead>", "<tbody>", *map(row_html, rows), "</tbody>"]
    if foot:
        lines += ["<tfoot>", *map(row_html, foot), "</tfoot>"]
    lines += ["</table>", "</div>"]
    return "\n".join(lines)


def figure(src: str, alt: str, caption: str = "") -> str:
    """An image beside the page (`src` relative to index.html) with an escaped caption."""
    caption_html = f"<figcaption>{inline(caption)}</figcaption>" if caption else ""
    return f'<figure><img src="{esc(quote(src))}" alt="{esc(alt)}">{caption_html}</figure>'
