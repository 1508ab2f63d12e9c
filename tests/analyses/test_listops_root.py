"""analyses.listops_root: the columns read known predictions right, and on a trained tiny run its accuracy is the
one the run recorded (predictions, labels and roots line up); a run without its checkpoint is one clear error."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from analyses import listops_root
from lra import train
from tests.lra.conftest import TINY, compose_config

FIRST = np.array([1, 1, 1, 1, 2, 2, 2, 2])
LABELS = np.array([9, 9, 9, 4, 0, 0, 0, 3])
RULE = np.array([9, 9, 9, 9, 0, 0, 0, 0])  # the rule fitted elsewhere: right on 6 of 8


def test_a_model_that_is_the_rule_knows_nothing_beyond_the_root():
    row = listops_root.root_columns(RULE.copy(), FIRST, LABELS, RULE)
    assert (row["acc"], row["rule"], row["agree_rule"], row["root_only"]) == (75.0, 75.0, 100.0, 100.0)
    assert row["mode_acc"] == 75.0 and row["beyond_root"] == 0.0
    assert row["acc_rule_wrong"] == 0.0 and row["n_rule_wrong"] == 2
    assert row["ceiling"] == 75.0  # the rule fitted on these trees is this rule


def test_informed_departures_from_the_root_level_answer_count_as_beyond_the_root():
    perfect = listops_root.root_columns(LABELS.copy(), FIRST, LABELS, RULE)
    assert perfect["acc"] == 100.0 and perfect["root_only"] == 75.0 and perfect["beyond_root"] == 25.0
    assert perfect["acc_rule_wrong"] == 100.0
    noisy = LABELS.copy()
    noisy[[0, 4]] = [5, 7]  # two departures from the per-root mode, both wrong
    row = listops_root.root_columns(noisy, FIRST, LABELS, RULE)
    assert row["root_only"] == 50.0 and row["beyond_root"] < perfect["beyond_root"]


def test_on_a_trained_run_the_accuracy_is_the_recorded_one(tmp_path):
    cfg = compose_config(["attention=linear", "experiment=quick", f"data_dir={tmp_path / 'data'}", *TINY,
                          "task.max_steps=6", "task.eval_every=3", "trainer.enable_progress_bar=false"])
    run_dir = tmp_path / "run"
    record = train.run(cfg, run_dir)
    assert record["status"] == "completed"
    tables = tmp_path / "tables"
    assert listops_root.main([str(run_dir), "--splits", "test", "val", "--out-root", str(tmp_path / "analyses"),
                              "--tables", str(tables)]) == 0
    rows = json.loads((tmp_path / "analyses/listops_root/result.json").read_text())["rows"]
    assert [r["split"] for r in rows] == ["test", "val"]
    row = rows[0]
    assert row["acc"] == pytest.approx(100 * record["metrics"]["test_acc"], abs=0.01)
    assert row["acc"] == row["recorded_acc"] and 0 <= row["root_only"] <= 100
    assert rows[1]["acc"] == rows[1]["recorded_acc"]  # the best checkpoint's validation accuracy
    assert (tables / "listops_root.md").is_file() and (tables / "listops_root.png").is_file()
    shutil.rmtree(run_dir / "checkpoints")
    with pytest.raises(SystemExit, match="checkpoint .* is not there"):
        listops_root.main([str(run_dir), "--out-root", str(tmp_path / "analyses"), "--tables", str(tables)])
