"""The leaderboard page's detail parts: one block per run (config, git sha, wall time, tokens/s, learning curve),
the analyses' tables with their figures, and the lists of records not averaged."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pandas as pd

from lra_base.atomic import copy_atomic
from results.analyses import PUBLISHED, analysis_table, find_analyses, format_value, load_published
from results.collect import Problem
from results.html_template import code_spans, esc, figure, inline, number, table, text
from results.markdown import format_cell, format_hours
from results.plots_extra import plot_run_curve

COMMITTED_TABLES = Path(__file__).resolve().parent / "tables"


def short_id(prefix: str, *parts: object) -> str:
    """A stable HTML id (and file stem) for untrusted names: `prefix-` and 12 hex digits of their SHA-1."""
    digest = hashlib.sha1("\0".join(map(str, parts)).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{prefix}-{digest[:12]}"


def run_id(path: str) -> str:
    """The id of a run's detail block, from its record path."""
    return short_id("run", path)


def read_configs(long: pd.DataFrame) -> dict[str, object]:
    """Record path -> the run's recorded `config` (None when the file no longer reads)."""
    configs = {}
    for path in long["path"].drop_duplicates():
        try:
            record = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            record = {}
        configs[path] = record.get("config") if isinstance(record, dict) else None
    return configs


def format_metric(name: str, value: float) -> str:
    """Accuracies in percent to 2 decimals (as the tables), other metrics to 4 significant digits."""
    return format_cell(100 * value) if name.endswith("_acc") else f"{value:.4g}"


def run_block(rows: pd.DataFrame, config: object, curve: str | None, back: str | None,
              in_table_figure: bool = False) -> str:
    """One run's block: what it is, its metrics and costs, its learning curve (`curve`, its own figure; else, with
    `in_table_figure`, a link to the figure of its table `back`) and its config as JSON."""
    run = rows.iloc[0]
    metrics = rows[rows["metric"].notna()]  # (dropna(subset=...) costs ~10 ms a call: 30 s for 3,000 runs)
    fields = [("status", run["status"]),
              *((name, format_metric(name, value)) for name, value in zip(metrics["metric"], metrics["value"])),
              ("git sha", run["git_sha"] if pd.notna(run["git_sha"]) else ""),
              ("wall time", "" if pd.isna(run["wall_time_s"]) else
               f"{format_hours(run['wall_time_s'])} ({run['wall_time_s']:,.0f} s)"),
              ("train tokens per fit second (validation included)",
               "" if pd.isna(run["tokens_per_s"]) else f"{run['tokens_per_s']:,.0f}"),
              ("machine", run["machine"] if isinstance(run.get("machine"), str) and run["machine"] else "not recorded"),
              ("parameters", "" if pd.isna(run["params"]) else f"{int(run['params']):,}"),
              ("checked against", run["protocol"] or "—"), ("record", run["path"])]
    items = "".join(f"<dt>{esc(name)}</dt><dd>{esc(value)}</dd>" for name, value in fields)
    parts = [f'<section class="run" id="{run_id(run["path"])}">',
             f"<h3>{esc(run['attention'])} · {esc(run['task'])} · seed {esc(run['seed'])} "
             f"<small>(tag {esc(run['tag'])})</small></h3>", f'<div class="facts"><dl>{items}</dl>']
    if curve:
        parts.append(figure(curve, f"learning curve of {run['path']}", "validation accuracy against training step"))
    elif in_table_figure and back:
        parts.append(f'<p>Learning curve: in <a href="#{back}">its table\'s figure</a>.</p>')
    parts.append("</div>")
    shown = json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    parts.append(f"<details><summary>config</summary><pre>{esc(shown)}</pre></details>")
    if back:
        parts.append(f'<p><a href="#{back}">back to its table</a></p>')
    parts.append("</section>")
    return "\n".join(parts)


def runs_part(long: pd.DataFrame, configs: dict[str, object], images: Path, sections: dict[tuple, str],
              with_curves: set[str] = frozenset(), run_figures: bool = False) -> tuple[str, list[Path]]:
    """Every run's block, in the long table's order, and the learning-curve PNGs written under `images`: one per
    run with `run_figures` (a second or so each: thousands of runs take long), else none, a block then pointing
    to its table's figure.

    `sections` maps (tag, task) to the id of the table a run's row is in; `with_curves` holds the ids of the
    sections whose table has a learning-curve figure.
    """
    blocks, written = [], []
    for path, rows in long.groupby("path", sort=False):
        png = images / f"{run_id(path)}.png"
        curve = None
        if run_figures and plot_run_curve(rows, path, png):  # its own rows: no search of the whole table
            written.append(png)
            curve = f"{images.name}/{png.name}"
        back = sections.get((rows["tag"].iloc[0], rows["task"].iloc[0]))
        blocks.append(run_block(rows, configs.get(path), curve, back, back in with_curves))
    return "\n".join(blocks), written


def problems_list(problems: list[Problem], known: set[str]) -> str:
    """Records not averaged (or unreadable): kind, run, message and path, linked to the run's block if any.

    A message's markdown code spans (a duplicate's "as newer `path`") show as <code>, a path of a shown run linked
    to its block; no backtick of the markdown reaches the page as text.
    """
    def link(text: str) -> str | None:
        return f"#{run_id(text)}" if text in known else None
    items = []
    for problem in problems:
        where = esc(problem.path)
        if problem.path in known:
            where = f'<a href="#{run_id(problem.path)}">{where}</a>'
        run = f" ({esc(problem.run)})" if problem.run else ""
        items.append(f"<li>{esc(problem.kind)}{run}: {code_spans(problem.message, link)} <code>{where}</code></li>")
    return "<ul class=\"notes\">" + "".join(items) + "</ul>"


def is_number(value: object) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def analysis_figure(name: str, record_path: Path, out: Path, images: Path) -> tuple[str | None, Path | None]:
    """The analysis figure `<name>.png` as a path relative to the page: from the output folder, else the committed
    tables or beside the record (then copied under `images`); (None, None) when there is none."""
    if (out / f"{name}.png").is_file():
        return f"{name}.png", None
    for found in (COMMITTED_TABLES / f"{name}.png", record_path.parent / f"{name}.png"):
        if found.is_file():
            copy = images / f"analysis-{name}.png"
            copy_atomic(found, copy)  # never read through a link (LinkRefused names it)
            return f"{images.name}/{copy.name}", copy
    return None, None


CARD_PREFIX, CARD_DIR = "report_card_", "report_cards"  # analyses.report_card's record name and page folder


def card_page(name: str, out: Path) -> str:
    """The page of a report card (``report_cards/<attention>.md`` beside the tables), relative to ``out``; "" when
    ``name`` is no card's or its page is not there."""
    if not name.startswith(CARD_PREFIX):
        return ""
    page = Path(CARD_DIR) / f"{name[len(CARD_PREFIX):]}.md"
    return page.as_posix() if (out / page).is_file() else ""


def analysis_section(name: str, path: Path, record: dict, out: Path, images: Path) -> tuple[str, list[Path]]:
    """One analysis: provenance, its table as in `<name>.md` (sortable), its notes and its figure."""
    frame = analysis_table(record)
    columns = [str(column) for column in frame.columns]
    kinds = ["number" if all(is_number(v) or v is None or (isinstance(v, float) and math.isnan(v))
                             for v in frame[column]) else "text" for column in frame.columns]
    rows = [[number(format_value(v), v) if kind == "number" and v is not None else text(format_value(v))
             for v, kind in zip(row, kinds)] for row in frame.itertuples(index=False)]
    lines = [f'<h3 id="{short_id("analysis", name)}">Analysis <code>{esc(name)}</code></h3>', '<ul class="notes">']
    if record.get("published"):
        _, source = load_published(record["published"])
        lines.append(f"<li><code>{esc(PUBLISHED.strip())}</code>: {esc(source.rstrip('.'))}.</li>")
    page = card_page(name, out)
    if page:
        lines.append(f'<li>The whole card, with its verdict and figures: <a href="{esc(page)}">{esc(page)}</a>.</li>')
    lines.append(f"<li>git {esc(record.get('git_sha'))}, {esc(record.get('wall_time_s'))} s, "
                 f"finished {esc(record.get('finished_at'))}; record <code>{esc(path.as_posix())}</code>.</li></ul>")
    lines.append(table(short_id("table", "analysis", name), list(zip(columns, kinds)), rows))
    lines += [f"<ul class=\"notes\">{''.join(f'<li>{inline(note)}</li>' for note in record.get('notes') or [])}</ul>"]
    src, copied = analysis_figure(name, path, out, images)
    if src:
        lines.append(figure(src, f"figure of the analysis {name}", f"`{name}.png`"))
    return "\n".join(lines), [copied] if copied else []


def analyses_part(roots: list[str | Path], out: Path, images: Path) -> tuple[str, list[Path]]:
    """Every analysis found under `roots` (newest completed record per name), or "" when there is none."""
    found = find_analyses(roots)
    if not found:
        return "", []
    parts, written = ['<h2 id="analyses">Analyses</h2>'], []
    for name, (path, record) in found.items():
        html, copied = analysis_section(name, path, record, out, images)
        parts.append(html)
        written += copied
    return "\n".join(parts), written

