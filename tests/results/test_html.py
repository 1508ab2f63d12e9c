"""The leaderboard page (`python -m results --html`): the numbers of lra.md, escaped records, a real browser.

The browser test drives Debian's headless Chromium through the DevTools protocol (`results.browser`): it reads
the table rows from the DOM, clicks column headers with mouse events and checks the new row order, follows a run
link and saves a screenshot (set LEADERBOARD_SCREENSHOT=path to keep it, as for results/tables/leaderboard.png).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from results.__main__ import main
from results.browser import Chromium, find_chromium
from results.html import section_id, table_id
from results.html_runs import run_id
from results.html_template import code_spans, number, page, table
from tests.results.leaderboard_records import HOSTILE, write_leaderboard_records
from tests.results.records import write_record

DEFAULT_LISTOPS = ["softmax", "nystrom", "skyformer", "llops", "linear", "my_attn"]  # published order, then by name


def markdown_rows(markdown: str, tag: str) -> dict[str, dict[str, str]]:
    """{attention: {column: cell}} of the first table in lra.md's section for `tag` (its results table)."""
    section = markdown.split(f"## tag `{tag}`")[1].split("\n\n|")[1].split("\n\n")[0]
    split = [[cell.strip() for cell in line.strip("|").split("|")] for line in ("|" + section).splitlines()]
    return {row[0]: dict(zip(split[0], row, strict=True)) for row in split[2:]}


class Tables(HTMLParser):
    """{table id: {"header": [...], "body": [[cell text]], "foot": [[...]], "sort": [[data-sort or None]]}}."""

    def __init__(self, text: str):
        super().__init__()
        self.tables, self.current, self.part, self.cell = {}, None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.current = self.tables.setdefault(attrs.get("id"), {"header": [], "body": [], "foot": [], "sort": []})
        elif tag in ("thead", "tbody", "tfoot") and self.current is not None:
            self.part = {"thead": "header", "tbody": "body", "tfoot": "foot"}[tag]
        elif tag == "tr" and self.part in ("body", "foot"):
            self.current[self.part].append([])
            if self.part == "body":
                self.current["sort"].append([])
        elif tag in ("td", "th") and self.current is not None:
            self.cell = []
            if tag == "td" and self.part == "body":
                self.current["sort"][-1].append(attrs.get("data-sort"))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            value = "".join(self.cell).strip()
            (self.current["header"] if self.part == "header" else self.current[self.part][-1]).append(value)
            self.cell = None
        elif tag == "table":
            self.current = self.part = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


class Elements(HTMLParser):
    """Every start tag of a document with its attributes, as a parser (a browser) reads them."""

    def __init__(self, text: str):
        super().__init__()
        self.elements = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, attrs))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The made-up records' tables and page, written once by the CLI."""
    root = tmp_path_factory.mktemp("leaderboard")
    write_leaderboard_records(root / "runs")
    here = os.getcwd()
    os.chdir(root)  # relative paths, as a user types them: the page names its records folder `runs`
    try:
        assert main(["runs", "--out", "tables", "--html"]) == 0
    finally:
        os.chdir(here)
    return root / "tables"


def page_table(site: Path, tag: str, task: str) -> dict:
    return Tables((site / "index.html").read_text(encoding="utf-8")).tables[table_id(tag, task)]


@pytest.mark.parametrize("tag, task", [("default", "listops"), ("default", "text"), ("quick", "listops")])
def test_sections_show_exactly_the_markdown_cells(site, tag, task):
    markdown = markdown_rows((site / "lra.md").read_text(encoding="utf-8"), tag)
    table = page_table(site, tag, task)
    ours = {a: row for a, row in markdown.items() if a != "majority class" and row[task]}
    assert [row[0] for row in table["body"]] == list(ours)  # the markdown's rows with a value, in its order
    labels = [h.removesuffix(" (published)") for h in table["header"] if h.endswith(" (published)")]
    deltas = [h.removeprefix("Δ ") for h in table["header"] if h.startswith("Δ ")]
    shown = next(iter(markdown.values())).keys()
    assert [f"{task} ({label})" for label in labels] == [c for c in shown if c.startswith(f"{task} (")]
    assert [f"{task} Δ ({label})" for label in deltas] == [c for c in shown if c.startswith(f"{task} Δ (")]
    for row in table["body"]:
        cells = dict(zip(table["header"], row))
        assert cells["test accuracy (%)"] == ours[row[0]][task].strip("*")
        for label in labels:
            assert cells[f"{label} (published)"] == ours[row[0]][f"{task} ({label})"]
        for label in deltas:
            assert cells[f"Δ {label}"] == ours[row[0]][f"{task} Δ ({label})"]
    assert table["foot"][0][:2] == ["majority class", markdown["majority class"][task]]


def test_published_columns_follow_the_protocol_rules(site):
    header = page_table(site, "default", "listops")["header"]
    assert header[:3] == ["attention", "test accuracy (%)", "seeds"]
    assert {"Nystromformer port (published)", "LLoPS paper (published)"} <= set(header)
    assert not [h for h in header if h.startswith("Δ")]  # default follows no published protocol: context only
    quick = page_table(site, "quick", "listops")
    assert not [h for h in quick["header"] if "published" in h or h.startswith("Δ")]
    assert [row[0] for row in quick["body"]] == ["softmax", "nystrom", "llops", "linear"]
    rows = {row[0]: dict(zip(header, row)) for row in page_table(site, "default", "listops")["body"]}
    assert rows["softmax"]["test accuracy (%)"] == "37.70 ± 0.71 (n=2, escaped 2/2)" and rows["softmax"]["seeds"] == "2"
    assert rows["softmax"]["Nystromformer port (published)"] == "37.10"
    assert rows["my_attn"]["LLoPS paper (published)"] == ""
    assert rows["softmax"]["runs"] == "seed 0 seed 1"


def test_records_are_escaped_and_nothing_leaves_the_folder(site):
    text = (site / "index.html").read_text(encoding="utf-8")
    assert HOSTILE not in text and html.escape(HOSTILE) in text and "&lt;b&gt;markup&lt;/b&gt;" in text
    elements = Elements(text).elements
    assert [tag for tag, _ in elements].count("script") == 1
    assert not [(tag, name) for tag, attrs in elements for name, _ in attrs if name.startswith("on")]
    assert not re.search(r'(src|href)="(https?:)?//', text)
    sources = re.findall(r'<img src="([^"]+)"', text)
    assert len(sources) >= 6 and all((site / src).is_file() for src in sources)  # plots, curves, the analysis'
    assert re.search(r"default-src 'none'", text)


def test_rows_link_to_their_run_blocks(site):
    text = (site / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'href="#(run-[0-9a-f]{12})"', text))
    assert len(anchors) == 15 and all(f'id="{anchor}"' in text for anchor in anchors)  # 14 completed, 1 failed
    block = text.split('<section class="run"')[2]  # long order: default listops linear, llops, ...
    assert "llops · listops · seed 0" in block and "0123abc" in block and "1.92 h (6,923 s)" in block
    assert "52,000" in block and "&quot;tag&quot;: &quot;default&quot;" in block
    assert f'Learning curve: in <a href="#{section_id("default", "listops")}">' in block  # its table's figure
    assert f'href="#{section_id("default", "listops")}"' in block


CHROMIUM = find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: apt-get install chromium (.ci/run does where it can)")
def test_page_in_headless_chromium(site, tmp_path):
    started = time.monotonic()
    tid = table_id("default", "listops")
    header = page_table(site, "default", "listops")["header"]
    rows = f"Array.from(document.getElementById({json.dumps(tid)}).tBodies[0].rows, r => r.cells[0].textContent)"

    def column(label):
        return f"#{tid} thead th:nth-child({header.index(label) + 1})"
    with Chromium(1280, 1300, binary=CHROMIUM) as browser:
        browser.open((site / "index.html").as_uri())
        assert browser.evaluate(rows) == DEFAULT_LISTOPS
        assert browser.evaluate("window.pwned === undefined && document.scripts.length === 1")
        assert browser.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
        browser.click(column("test accuracy (%)"))  # numbers: highest first
        assert browser.evaluate(rows) == ["llops", "skyformer", "softmax", "nystrom", "my_attn", "linear"]
        sorted_by = f"document.querySelector('{column('test accuracy (%)')}').getAttribute('aria-sort')"
        assert browser.evaluate(sorted_by) == "descending"
        browser.evaluate("window.scrollTo(0, 0)")
        shot = browser.screenshot(tmp_path / "leaderboard.png")
        browser.click(column("test accuracy (%)"))  # again: reversed
        assert browser.evaluate(rows) == ["linear", "my_attn", "nystrom", "softmax", "skyformer", "llops"]
        browser.click(column("Nystromformer port (published)"))  # blanks last, in their current order
        assert browser.evaluate(rows) == ["nystrom", "softmax", "linear", "my_attn", "skyformer", "llops"]
        browser.click(column("Nystromformer port (published)"))
        assert browser.evaluate(rows) == ["softmax", "nystrom", "linear", "my_attn", "skyformer", "llops"]
        browser.click(column("attention"))  # text: A to Z
        assert browser.evaluate(rows) == sorted(DEFAULT_LISTOPS)
        assert browser.evaluate(f"document.getElementById({json.dumps(tid)}).tFoot.rows[0].cells[0].textContent") \
            == "majority class"
        browser.click(f"#{tid} tbody tr:first-child a")  # linear's run
        target = browser.evaluate("""new Promise(done => { const look = () => {  // the fragment once navigated
            const block = document.querySelector(':target');
            block ? done(block.className + ' ' + block.querySelector('h3').textContent) : setTimeout(look, 20);
        }; look(); })""")
        assert target.startswith("run linear · listops · seed 0")
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("LEADERBOARD_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["LEADERBOARD_SCREENSHOT"])
    assert time.monotonic() - started < 60  # the browser part; about 10 s on a busy 2-core machine


def test_tables_scroll_inside_their_own_box(site):
    text = (site / "index.html").read_text(encoding="utf-8")
    assert re.search(r"\.table-scroll \{ overflow-x: auto; max-width: 100%;", text)
    tables = re.findall(r"(<[^>]+>)\n<table ", text)
    assert len(tables) == text.count("<table ") >= 4 and set(tables) == {'<div class="table-scroll">'}


def page_text(markup: str) -> str:
    """What a reader sees of some HTML: the tags dropped, the entities decoded."""
    return html.unescape(re.sub(r"<[^>]*>", "", markup))


def test_duplicate_note_shows_code_not_backticks(tmp_path):
    older = write_record(tmp_path / "runs" / "a", "listops", "softmax", 0, 0.40, finished_at="2026-01-01T00:00:00")
    newer = write_record(tmp_path / "runs" / "b", "listops", "softmax", 0, 0.50, finished_at="2026-02-01T00:00:00")
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables"), "--html"]) == 0
    text = (tmp_path / "tables" / "index.html").read_text(encoding="utf-8")
    note = re.search(r"<li>duplicate.*?</li>", text).group(0)
    assert "`" not in page_text(text) and "`" not in page_text(note)
    assert f'<code><a href="#{run_id(newer.as_posix())}">{html.escape(newer.as_posix())}</a></code>' in note
    assert older.as_posix() in page_text(note)


def test_code_spans_escape_and_drop_a_lone_backtick():
    assert code_spans("as newer `a<b>` and `x") == "as newer <code>a&lt;b&gt;</code> and x"
    assert code_spans("`p`", lambda p: "#run-1" if p == "p" else None) == '<code><a href="#run-1">p</a></code>'


FITS = """(() => {  // the page never scrolls sideways; every table box stays inside the window and scrolls itself
    const boxes = Array.from(document.querySelectorAll("table"), table => table.parentElement);
    return {page: document.scrollingElement.scrollWidth, window: window.innerWidth,
            boxes: boxes.map(box => [box.className, getComputedStyle(box).overflowX,
                                     box.getBoundingClientRect().right <= window.innerWidth,
                                     box.scrollWidth > box.clientWidth])};
})()"""


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: apt-get install chromium (.ci/run does where it can)")
def test_wide_tables_scroll_in_their_box_not_the_page(site, tmp_path):
    """At 1,400 and 1,000 px: the made-up page, the committed records' page (its microscope and SLAY tables are
    wider than the window) and a 40-column table never make the page wider than the window."""
    wide = tmp_path / "wide.html"
    header = [(f"a long column name {i}", "number") for i in range(40)]
    wide.write_text(page("wide", table("wide", header, [[number(f"{i:,}", i) for i in range(40)]])), encoding="utf-8")
    committed = tmp_path / "committed"
    assert main([str(Path(__file__).resolve().parents[2] / "results" / "runs"), "--out", str(committed),
                 "--html"]) == 0
    for width in (1400, 1000):
        with Chromium(width, 900, binary=CHROMIUM) as browser:
            for index in (site / "index.html", committed / "index.html", wide):
                browser.open(index.as_uri())
                found = browser.evaluate(FITS)
                assert found["window"] == width and found["page"] <= width, (index, found)
                assert found["boxes"] and all(box[:3] == ["table-scroll", "auto", True] for box in found["boxes"])
                if index == wide:
                    assert found["boxes"][0][3]  # too wide for the window: it scrolls inside its box
