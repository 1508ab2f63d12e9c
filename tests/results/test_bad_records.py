"""Records that must never reach a table: non-finite metrics, diverged runs, crafted analysis records."""

from __future__ import annotations

import json
import math
import time

from analyses.record import write_analysis_record
from results.__main__ import main as results_main
from results.analyses import find_analyses
from results.collect import collect
from results.summary import summarize
from tests.results.records import write_record

ROWS = [{"setting": "degree", "method": "llops", "p": 2, "accuracy": 50.0}]


def test_a_record_with_any_non_finite_metric_is_never_averaged(tmp_path):
    write_record(tmp_path, "listops", "softmax", 0, 0.40)
    nan = write_record(tmp_path, "listops", "softmax", 1, 0.90)
    record = json.loads(nan.read_text())
    record["metrics"]["test_loss"] = math.nan  # json writes NaN, as the diverged run did
    nan.write_text(json.dumps(record))
    write_record(tmp_path, "listops", "softmax", 2, 0.95, status="diverged",
                 error="training loss became nan at step 19")
    long, problems = collect([tmp_path])
    summary = summarize(long).set_index(["tag", "attention"])
    assert summary.loc[("quick", "softmax"), "listops_mean"] == 40.0
    assert summary.loc[("quick", "softmax"), "listops_n"] == 1
    kinds = {(p.kind, p.run) for p in problems}
    assert ("bad value", "listops/softmax/seed 1") in kinds and ("failed", "listops/softmax/seed 2") in kinds
    assert set(long[long["seed"] == 1]["status"]) == {"bad value"}


def test_a_metric_written_as_null_was_not_measured_and_the_run_still_counts(tmp_path):
    """`lra.run.train` writes `val_acc: null` for a run that never validated: the test accuracy is still its number
    (such a run's settings differ from the protocol, so it sits in a drift section of its own)."""
    write_record(tmp_path, "listops", "softmax", 0, 0.40)
    unvalidated = write_record(tmp_path, "listops", "softmax", 1, 0.30)
    record = json.loads(unvalidated.read_text())
    record["metrics"]["val_acc"] = None
    unvalidated.write_text(json.dumps(record))
    long, problems = collect([tmp_path])
    assert problems == [] and summarize(long).set_index(["tag", "attention"]).loc[("quick", "softmax"),
                                                                                 "listops_n"] == 2
    assert "val_acc" not in set(long[long["seed"] == 1]["metric"])


def test_a_run_that_records_no_commit_shows_a_blank_git_sha_not_nan(tmp_path):
    write_record(tmp_path / "runs", "listops", "softmax", 0, 0.40, tag="default")
    write_record(tmp_path / "runs", "listops", "softmax", 1, tag="default", status="interrupted", git_sha=None)
    assert results_main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 0
    row = next(line for line in (tmp_path / "tables/lra.md").read_text().splitlines()
               if line.startswith("| softmax ") and "| listops |" in line and "|    1 |" in line)
    assert row.split("|")[-2].strip() == "" and "nan" not in row  # the git sha column, last


def analysis(root, name, **fields):
    path = write_analysis_record("ar_ablation", ROWS, keys=["setting", "method", "p"], config={}, started=time.time(),
                                 out_root=root / name)
    record = {**json.loads(path.read_text()), **fields}
    path.write_text(json.dumps(record))
    return path


def test_crafted_analysis_names_and_malformed_records_are_listed_not_followed(tmp_path):
    outputs, out = tmp_path / "outputs", tmp_path / "deep" / "tables"
    analysis(outputs, "good", analysis="good")
    escape = analysis(outputs, "escape", analysis="../../escaped")
    no_rows = analysis(outputs, "no_rows", analysis="no_rows", rows=None)
    bad_published = analysis(outputs, "published", analysis="published", published="../../../etc/passwd")
    assert set(find_analyses([outputs])) == {"good"}
    _, problems = collect([outputs])
    listed = {p.path: p.message for p in problems if p.kind == "malformed"}
    assert "not a plain name" in listed[escape.as_posix()]
    assert "rows is not a non-empty list" in listed[no_rows.as_posix()]
    assert "is not one of" in listed[bad_published.as_posix()]
    assert results_main([str(outputs), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["good.csv", "good.md"]
    assert not list(tmp_path.glob("escaped*")) and not list((tmp_path / "deep").glob("escaped*"))


def test_names_cannot_add_rows_headings_or_html_to_the_markdown(tmp_path):
    """Issue 29.8: an attention named like a table row, a tag with a newline, a task with HTML."""
    from results.markdown import to_markdown

    evil = "evil\n| softmax | **99.99 (n=9)** |"
    write_record(tmp_path, "listops", evil, 0, 0.2, tag="default")
    write_record(tmp_path, "listops", "softmax", 0, 0.3, tag="default\n## tag `fake`")
    write_record(tmp_path, "<script>alert(1)</script>", "softmax", 0, 0.3, tag="default")
    markdown = to_markdown(summarize(collect([tmp_path])[0]), [], {})
    assert not [line for line in markdown.splitlines() if line.startswith("| softmax") and "99.99" in line]
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown
    assert "\n## tag `fake`" not in markdown
    assert r"evil \| softmax \| \*\*99.99 (n=9)\*\* \|" in markdown
