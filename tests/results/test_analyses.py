"""Analysis records: written atomically, found by ``python -m results``, joined with published figures."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from analyses import ar_ablation
from analyses.record import write_analysis_record
from results.__main__ import main as results_main
from results.analyses import analysis_table, find_analyses
from results.collect import collect

ROWS = [{"setting": "degree", "method": "llops", "p": 2, "m": 64, "d": 64, "r": None, "accuracy": 50.0},
        {"setting": "width128", "method": "based", "p": None, "m": None, "d": 64, "r": 16, "accuracy": 40.0},
        {"setting": "new", "method": "ours_only", "p": 1, "m": 8, "d": 8, "r": None, "accuracy": 10.0}]


def write(tmp_path, rows=ROWS, published="llops_ar_ablation"):
    return write_analysis_record("ar_ablation", rows, keys=["setting", "method", "p"], config={"x": 1},
                                 started=time.time(), published=published, out_root=tmp_path, notes=["a note"])


def test_record_keeps_row_order_and_column_order(tmp_path):
    record = json.loads(write(tmp_path).read_text())
    assert record["kind"] == "analysis" and record["status"] == "completed" and record["notes"] == ["a note"]
    assert record["columns"] == ["setting", "method", "p", "m", "d", "r", "accuracy"]
    table = analysis_table({**record, "published": None})
    assert list(table.columns) == record["columns"] and list(table["method"]) == ["llops", "based", "ours_only"]


def test_published_values_sit_beside_ours_joined_on_the_keys(tmp_path):
    table = analysis_table(json.loads(write(tmp_path).read_text())).set_index(["setting", "method", "p"])
    assert table.loc[("degree", "llops", "2"), "accuracy (published)"] == 88.7
    assert table.loc[("degree", "llops", "2"), "accuracy"] == 50.0
    assert table.loc[("width128", "based", ""), "accuracy (published)"] == 91.9  # blank p joins blank p
    assert pd.isna(table.loc[("new", "ours_only", "1"), "accuracy (published)"])
    assert pd.isna(table.loc[("degree", "llops", "6"), "accuracy"])  # published-only rows stay, blank for us
    columns = list(table.columns)
    assert columns.index("accuracy (published)") == columns.index("accuracy") + 1


def test_a_published_value_sits_only_beside_the_row_of_its_own_m(tmp_path):
    """Before, ar_ablation joined on setting, method and p, so the paper's m = 256 accuracy (99) sat beside our
    m = 64 row too."""
    rows = [{"setting": "width192", "method": "llops", "p": 4, "m": m, "d": 96, "r": None, "accuracy": acc}
            for m, acc in ((256, 88.8), (64, 70.0))]
    record = json.loads(write_analysis_record("ar_ablation", rows, keys=list(ar_ablation.KEYS), config={},
                                              started=time.time(), published="llops_ar_ablation",
                                              out_root=tmp_path).read_text())
    table = analysis_table(record).set_index(["setting", "method", "p", "m"])
    assert table.loc[("width192", "llops", "4", "256"), "accuracy (published)"] == 99.0
    assert pd.isna(table.loc[("width192", "llops", "4", "64"), "accuracy (published)"])


def test_results_command_writes_analysis_tables_and_ignores_analysis_runs(tmp_path):
    write(tmp_path / "outputs" / "analyses")
    run_dir = tmp_path / "outputs" / "analyses" / "ar_ablation" / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text(json.dumps({
        "task": "ar", "attention": "llops", "seed": 0, "status": "completed", "config": {"analysis": "ar_ablation"},
        "metrics": {"test_acc": 0.5}}))
    assert set(find_analyses([tmp_path / "outputs"])) == {"ar_ablation"}
    long, problems = collect([tmp_path / "outputs"])
    assert long.empty and problems == []  # neither the analysis record nor its runs are LRA runs
    assert results_main([str(tmp_path / "outputs"), "--out", str(tmp_path / "tables")]) == 0
    markdown = (tmp_path / "tables" / "ar_ablation.md").read_text()
    assert "accuracy (published)" in markdown and "a note" in markdown
    assert (tmp_path / "tables" / "ar_ablation.csv").exists()


def test_an_analysis_table_names_the_record_it_shows_the_newest_of_the_roots(tmp_path):
    """A user's quick analysis in outputs/ replaces the committed one in their tables: the table says which it shows."""
    committed = write(tmp_path / "committed")
    record = json.loads(committed.read_text())
    newer = tmp_path / "outputs" / "ar_ablation" / "result.json"
    newer.parent.mkdir(parents=True)
    newer.write_text(json.dumps({**record, "finished_at": "2999-01-01T00:00:00+00:00", "rows": ROWS[:1]}))
    assert results_main([str(tmp_path / "committed"), str(tmp_path / "outputs"), "--out", str(tmp_path / "t")]) == 0
    markdown = (tmp_path / "t" / "ar_ablation.md").read_text()
    assert f"record `{newer.as_posix()}`" in markdown and "ours_only" not in markdown


def test_ar_ablation_rows_share_the_llops_run_of_the_narrow_width_and_take_each_rows_best_lr(tmp_path):
    rows = ar_ablation.settings((64, 256), (64, 96), (2, 4))
    assert [(r["setting"], r["method"], r.get("m")) for r in rows] == [
        ("degree", "llops", 64), ("degree", "llops", 64), ("degree", "llops", 256), ("degree", "llops", 256),
        ("width128", "based", None), ("width128", "llops", 64), ("width128", "llops", 256),
        ("width192", "based", None), ("width192", "llops", 64), ("width192", "llops", 256)]
    labels = {ar_ablation.run_label(r, 0, 1e-3) for r in rows}
    assert len(labels) == 8  # degree p=4 and width128 LLoPS are one run, at each m
    curve = tmp_path / "csv"
    curve.mkdir()
    (curve / "metrics.csv").write_text("step,val/acc\n99,0.2\n199,\n299,0.55\n399,0.9\n")

    def record(acc: float, val: float) -> dict:
        return {"status": "completed", "wall_time_s": 1.0, "run_dir": str(tmp_path),
                "metrics": {"test_acc": acc, "val_acc": val, "majority_acc": 0.03}}

    for row in rows:
        row["key"] = ar_ablation.run_label(row, 0, 0.0)
    # lr 1e-3: better validation for every row, so every row reports it; two seeds each
    records = {row["key"]: {3e-3: [record(0.2, 0.2)] * 2, 1e-3: [record(0.5, 0.6), record(0.7, 0.6)]}
               for row in rows}
    table = ar_ablation.summarise(rows, records)
    assert {r["lr"] for r in table} == {1e-3}
    assert table[0]["accuracy"] == pytest.approx(60) and table[0]["std"] == pytest.approx(14.142, abs=1e-3)
    assert table[0]["seeds"] == 2 and table[0]["crossing_steps"] == "300 300"  # logged at index 299
    assert table[4]["m"] is None and table[2]["m"] == 256
    table[5]["accuracy"], table[4]["accuracy"] = 40.0, 50.0  # width128: BASED ahead at m = 64
    verdicts = ar_ablation.claims(table)
    assert any("m = 64, width128" in v and "LLoPS >= BASED? no" in v for v in verdicts)


def test_a_report_cards_memory_rows_read_mib_old_records_too(tmp_path):
    """Before, a card labelled its memory rows MB; the values were always MiB (bytes / 2**20): a card written then
    is shown in MiB, as the card writes them now."""
    from analyses import _card_cost

    rows = [_card_cost.row("memory", "llops", 1024, 1.008, "MB", ""),
            _card_cost.row("fwd+bwd time", "llops", 1024, 3.0, "ms", "")]
    path = write_analysis_record("report_card_llops", rows, keys=["section", "check"], config={}, started=time.time(),
                                 out_root=tmp_path)
    table = analysis_table(json.loads(path.read_text()))
    assert list(table["measure"]) == ["MiB", "ms"]
    assert table.loc[0, "value"] == 1.008
