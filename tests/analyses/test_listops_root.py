"""analyses.listops_root: the columns read known predictions right, and on a trained tiny run its accuracy is the
recorded one and its rule and ceiling are the ones fitted on the files (predictions, labels and roots line up);
``--data-dir`` moves the data; a run without its checkpoint is one clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analyses import listops_root
from data_prep.compact import load_split
from data_prep.listops_roots import first_tokens, root_operator_rule
from lra.run import train
from tests.lra.conftest import TINY, compose_run

FIRST = np.array([1, 1, 1, 1, 2, 2, 2, 2])
LABELS = np.array([9, 9, 9, 4, 0, 0, 0, 3])
RULE = np.array([9, 9, 9, 9, 0, 0, 0, 0])  # the rule fitted elsewhere: right on 6 of 8


def test_a_model_that_is_the_rule_knows_nothing_beyond_the_root():
    row = listops_root.root_columns(RULE.copy(), FIRST, LABELS, RULE)
    assert (row["acc"], row["rule"], row["agree_rule"], row["own_mode"]) == (75.0, 75.0, 100.0, 100.0)
    assert row["mode_acc"] == 75.0 and row["beyond_root"] == 0.0
    assert row["acc_rule_wrong"] == 0.0 and row["n_rule_wrong"] == 2
    assert row["ceiling"] == 75.0  # the rule fitted on these trees is this rule


def test_a_root_function_with_other_labels_than_the_rule_is_still_a_root_function():
    other = np.array([4, 4, 4, 4, 0, 0, 0, 0])
    row = listops_root.root_columns(other, FIRST, LABELS, RULE)
    assert (row["acc"], row["own_mode"], row["agree_rule"], row["beyond_root"]) == (50.0, 100.0, 50.0, 0.0)
    assert row["acc_rule_wrong"] == 50.0  # tree 3: its label 4 is this function's, not the rule's


def test_informed_departures_from_the_root_level_answer_count_as_beyond_the_root():
    perfect = listops_root.root_columns(LABELS.copy(), FIRST, LABELS, RULE)
    assert perfect["acc"] == 100.0 and perfect["own_mode"] == 75.0 and perfect["beyond_root"] == 25.0
    assert perfect["acc_rule_wrong"] == 100.0
    mixed = LABELS.copy()
    mixed[[0, 4]] = [5, 7]  # two more departures from the per-root mode, both wrong: they cancel the right two
    row = listops_root.root_columns(mixed, FIRST, LABELS, RULE)
    assert row["own_mode"] == 50.0 and row["beyond_root"] == 0.0
    assert (row["gains"], row["losses"], row["sign_p"]) == (2, 2, 1.0)
    assert (perfect["gains"], perfect["losses"]) == (2, 0)


def test_the_sign_test_is_the_binomial_tail():
    assert listops_root.sign_test(0, 0) == 1.0
    assert listops_root.sign_test(5, 0) == pytest.approx(2 / 32)  # all five of five one way, either way
    assert listops_root.sign_test(1, 9) == pytest.approx(2 * 11 / 1024) == listops_root.sign_test(9, 1)
    assert listops_root.sign_test(60, 39) < 0.05 < listops_root.sign_test(55, 45)


def test_on_a_trained_run_the_numbers_are_the_recorded_and_the_files_ones(tmp_path):
    cfg = compose_run(["attention=linear", "experiment=quick", f"data_dir={tmp_path / 'data'}", *TINY,
                       "task.max_steps=6", "task.eval_every=3", "trainer.enable_progress_bar=false"])
    run_dir = tmp_path / "run"
    record = train.run(cfg, run_dir)
    assert record["status"] == "completed"
    shutil.move(tmp_path / "data", tmp_path / "moved")  # --data-dir reads it there, under the same subfolder
    tables = tmp_path / "tables"
    assert listops_root.main(["--split", "test", "--split", "val", str(run_dir), "--data-dir",
                              str(tmp_path / "moved"), "--out-root", str(tmp_path / "analyses"), "--tables",
                              str(tables)]) == 0
    assert not (tmp_path / "data").exists()  # not generated again where the run had it
    rows = json.loads((tmp_path / "analyses/listops_root/result.json").read_text())["rows"]
    assert [r["split"] for r in rows] == ["test", "val"]
    assert rows[0]["acc"] == pytest.approx(100 * record["metrics"]["test_acc"], abs=0.01) == rows[0]["recorded_acc"]
    assert rows[1]["acc"] == rows[1]["recorded_acc"]  # the best checkpoint's validation accuracy
    task_dir = tmp_path / "moved" / Path(cfg.task.data.root).relative_to(tmp_path / "data") / "listops"
    splits = {name: load_split(task_dir, name, rebuild_cmd="-") for name in ("train", "test")}
    (train_first, train_labels), (test_first, test_labels) = ((first_tokens(s), s.labels) for s in splits.values())
    assert rows[0]["rule"] == pytest.approx(100 * root_operator_rule(train_first, train_labels, test_first,
                                                                     test_labels)[0], abs=0.01)
    assert rows[0]["ceiling"] == pytest.approx(100 * root_operator_rule(test_first, test_labels, test_first,
                                                                        test_labels)[0], abs=0.01)
    assert (tables / "listops_root.md").is_file() and (tables / "listops_root.png").is_file()

    # --add-to: an earlier record's rows of other runs stay (each with its git_sha), this run's are measured again
    earlier = json.loads((tmp_path / "analyses/listops_root/result.json").read_text())
    other = [{**r, "attention": "softmax", "seed": 7, "git_sha": "abcdef0"} for r in earlier["rows"]]
    earlier["rows"] = other + [{**r, "acc": -1.0} for r in earlier["rows"]]
    earlier["config"]["runs"] = ["/gone/outputs/listops/softmax/seed7/quick", str(run_dir)]
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    args = [str(run_dir), "--data-dir", str(tmp_path / "moved"), "--out-root", str(tmp_path / "merged"), "--tables",
            str(tables)]
    both = ["--split", "test", "--split", "val"]
    assert listops_root.main([*both, *args, "--add-to", str(tmp_path / "earlier.json")]) == 0
    merged = json.loads((tmp_path / "merged/listops_root/result.json").read_text())
    assert merged["rows"] == other + rows  # the earlier rows of this run (acc -1) are replaced
    assert merged["config"]["runs"] == ["/gone/outputs/listops/softmax/seed7/quick", str(run_dir)]
    assert "softmax" in (tables / "listops_root.md").read_text()
    with pytest.raises(SystemExit, match="not a listops_root record"):
        listops_root.main([*args, "--add-to", str(tmp_path / "run" / "result.json")])
    before = (tmp_path / "merged/listops_root/result.json").read_bytes()
    with pytest.raises(SystemExit, match="its val rows of the other runs would be dropped"):  # before: dropped
        listops_root.main(["--split", "test", *args, "--add-to", str(tmp_path / "merged/listops_root/result.json")])
    assert (tmp_path / "merged/listops_root/result.json").read_bytes() == before
    merged = str(tmp_path / "merged/listops_root/result.json")
    assert listops_root.parse_args([str(run_dir), "--add-to", merged]).splits == ["test", "val"]  # the record's own
    earlier["config"]["splits"] = ["test"]
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    with pytest.raises(SystemExit, match="it has no val rows"):
        listops_root.main(["--split", "val", *args, "--add-to", str(tmp_path / "earlier.json")])
    shutil.rmtree(run_dir / "checkpoints")
    with pytest.raises(SystemExit, match="checkpoint .* is not there"):
        listops_root.main([str(run_dir), "--out-root", str(tmp_path / "analyses"), "--tables", str(tables)])
    with pytest.raises(SystemExit, match="no result.json; give run folders"):
        listops_root.main([str(tmp_path), "--out-root", str(tmp_path / "analyses"), "--tables", str(tables)])
