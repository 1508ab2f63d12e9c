"""The split-spread analysis on tiny generated ListOps, and its note under the tables it applies to."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analyses import listops_splits
from data_prep.listops import generate
from results.__main__ import main as results_main
from tests.results.records import write_record


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    base = tmp_path_factory.mktemp("splits")
    generate(base / "data", train=300, val=10, test=60, seed=5, log=lambda _: None)
    out = base / "runs" / "analyses"
    assert listops_splits.main(["--splits", "4", "--data-dir", str(base / "data"), "--out-root", str(out),
                                "--tables", str(base / "tables")]) == 0
    return base, json.loads((out / "listops_splits" / "result.json").read_text())


def test_the_rows_summarise_the_fresh_splits_and_place_ours(measured):
    base, record = measured
    fresh = pd.read_csv(base / "runs" / "analyses" / "listops_splits" / "splits.csv")
    assert fresh["seed"].tolist() == [1, 2, 3, 4]
    rows = {row["statistic"]: row for row in record["rows"]}
    for column in ("rule", "ceiling", "majority"):
        assert rows["mean"][column] == pytest.approx(fresh[column].mean(), abs=0.01)
        assert rows["min"][column] <= rows["p50"][column] <= rows["max"][column]
        tie = (fresh[column] - rows["ours"][column]).abs() < 1e-3  # both rounded to 4 decimals
        below = ((fresh[column] < rows["ours"][column]) & ~tie).mean() + 0.5 * tie.mean()
        assert rows["ours: percentile"][column] == pytest.approx(100 * below, abs=0.1)
    assert (fresh["ceiling"] >= fresh["rule"]).all()  # fitted on the split itself: no root-only rule does better
    assert record["config"]["split_size"] == 60 and "test" in record["config"]["data"]


def test_the_note_goes_under_tables_whose_rule_was_scored_on_that_split(measured, tmp_path):
    base, record = measured
    runs = base / "runs"
    for tag, test_data in (("default", record["config"]["data"]["test"]), ("other_data", "0" * 64)):
        (runs / "rules" / "listops").mkdir(parents=True, exist_ok=True)
        (runs / "rules" / "listops" / f"{tag}.json").write_text(json.dumps(
            {"kind": "rule", "task": "listops", "tag": tag, "rule": "root-operator rule", "test_acc": 0.35,
             "data": {"test": test_data}}))
        write_record(runs, "listops", "softmax", 0, 0.35, tag=tag)
    assert results_main([str(runs), "--out", str(tmp_path)]) == 0
    markdown = (tmp_path / "lra.md").read_text()
    default, other = markdown.split("## tag `other_data`")
    assert "Split spread" in default and "over 4 fresh test splits of 60 trees" in default
    assert "Split spread" not in other
