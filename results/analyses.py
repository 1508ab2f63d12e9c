"""Analysis records (``kind: analysis``, written by ``analyses``) -> one table per analysis.

Each table lists our rows; when the record names a published table (``results/reference/<name>.csv``),
the published value of every shared column sits beside ours as ``<column> (published)``, joined on the
record's ``keys``. Rows only one side has stay, blank on the other.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from lra.run.record import ANALYSIS_KIND, AnalysisRecord
from lra.run.record_compat import analysis_rows
from lra_base.atomic import write_atomic
from results.collect import MalformedRecord, analysis_problem, find_records, read_record
from results.markdown import markdown_table
from results.summary import load_reference

PUBLISHED = " (published)"


def find_analyses(roots: list[str | Path]) -> dict[str, tuple[Path, AnalysisRecord]]:
    """The newest completed analysis record per analysis name under ``roots``; bad ones are skipped (results.collect
    lists them)."""
    newest: dict[str, tuple[Path, AnalysisRecord]] = {}
    for path in find_records(roots):
        try:
            record = read_record(path)
        except MalformedRecord:
            continue  # reported by results.collect
        if not isinstance(record, dict) or record.get("kind") != ANALYSIS_KIND or record.get("status") != "completed":
            continue
        if analysis_problem(record):
            continue
        name = str(record.get("analysis"))
        if name not in newest or str(record.get("finished_at")) > str(newest[name][1].get("finished_at")):
            newest[name] = (path, record)
    return dict(sorted(newest.items()))


def load_published(name: str) -> tuple[pd.DataFrame, str]:
    """``results/reference/<name>.csv`` (unindexed) and its ``#`` source lines joined."""
    frame = load_reference(name, index=None)
    return frame, " ".join(part for part in (frame.attrs["source"], frame.attrs["notes"]) if part)


def analysis_table(record: AnalysisRecord) -> pd.DataFrame:
    """Our rows, with the published value of each shared column beside it when the record names a table."""
    ours = pd.DataFrame(analysis_rows(record))
    ours = ours[[c for c in record.get("columns") or [] if c in ours.columns] or list(ours.columns)]
    if not record.get("published"):
        return ours
    published, _ = load_published(record["published"])
    keys = [key for key in record["keys"] if key in published.columns and key in ours.columns]
    shared = [c for c in ours.columns if c in published.columns and c not in keys]
    if not keys or not shared:
        return ours
    for key in keys:  # published csvs read integers as floats when a column has blanks
        published[key] = published[key].astype(object).where(published[key].notna(), None)
        ours[key] = ours[key].astype(object).where(ours[key].notna(), None)
        published[key] = published[key].map(normal_key)
        ours[key] = ours[key].map(normal_key)
    renamed = published[keys + shared].rename(columns={c: c + PUBLISHED for c in shared})
    table = ours.merge(renamed, on=keys, how="left")  # our row order; published-only rows follow
    only_published = renamed.merge(ours[keys], on=keys, how="left", indicator=True)
    only_published = only_published[only_published["_merge"] == "left_only"].drop(columns="_merge")
    table = pd.concat([table, only_published], ignore_index=True)
    order = list(ours.columns)
    for column in reversed(shared):
        order.insert(order.index(column) + 1, column + PUBLISHED)
    return table[order]


def normal_key(value):
    """Join keys compare equal across int/float/str spellings (``4``, ``4.0``, ``"4"``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def format_value(value) -> str:
    """Numbers to 4 significant digits (scientific below 1e-3), blanks for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.3e}" if value != 0 and abs(value) < 1e-3 else f"{value:.4g}"


def analysis_markdown(name: str, record: AnalysisRecord, table: pd.DataFrame, path: Path) -> str:
    """Title, provenance (which record at ``path``: the newest of the roots', committed or a user's), the table, and
    the record's notes."""
    lines = [f"# Analysis `{name}`", ""]
    if record.get("published"):
        _, source = load_published(record["published"])
        lines.append(f"- `(published)`: {source.rstrip('.')}.")
    lines.append(f"- git {record.get('git_sha')}, {record.get('wall_time_s')} s, finished {record.get('finished_at')}; "
                 f"record `{path.as_posix()}`.")
    lines += ["", markdown_table(list(map(str, table.columns)),
                                 [[format_value(v) for v in row] for row in table.itertuples(index=False)])]
    if record.get("notes"):
        lines += ["", *(f"- {note}" for note in record["notes"])]
    return "\n".join(lines) + "\n"


def write_analysis_tables(name: str, record: AnalysisRecord, out: str | Path, path: Path) -> list[Path]:
    """Write ``<out>/<name>.csv`` and ``<out>/<name>.md`` of the record at ``path``; return their paths."""
    table = analysis_table(record)
    out = Path(out)
    write_atomic(out / f"{name}.csv", table.to_csv(index=False))
    write_atomic(out / f"{name}.md", analysis_markdown(name, record, table, Path(path)))
    return [out / f"{name}.csv", out / f"{name}.md"]
