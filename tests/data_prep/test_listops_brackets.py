"""ListOps without its "]" tokens (the pre-2021 LRA input pipeline): the same trees and labels, recorded in the
manifest and the rebuild command, and a run refuses data made the other way."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data_prep import listops
from data_prep.compact import load_split
from data_prep.listops import END_ID, generate_command
from lra_base.errors import UserError
from tests.lra.conftest import compose_run

SMALL = dict(train=40, val=5, test=5, min_length=10, max_length=40, seed=3)


def test_dropping_close_brackets_keeps_the_trees_and_labels(tmp_path):
    kept = listops.generate(tmp_path / "kept", **SMALL, log=lambda _: None)
    dropped = listops.generate(tmp_path / "dropped", **SMALL, close_brackets=False, log=lambda _: None)
    for split in ("train", "val", "test"):
        a, b = (load_split(d, split, rebuild_cmd="") for d in (kept, dropped))
        assert np.array_equal(a.labels, b.labels)
        assert not (b.tokens == END_ID).any() and (a.tokens == END_ID).any()
        assert np.array_equal(a.lengths - b.lengths, [int((a.sequence(i) == END_ID).sum()) for i in range(len(a))])
        assert all(np.array_equal(a.sequence(i)[a.sequence(i) != END_ID], b.sequence(i)) for i in range(len(a)))
    manifest = json.loads((dropped / "manifest.json").read_text())
    assert manifest["source"]["close_brackets"] is False and manifest["command"].endswith("--no-close-brackets")
    assert json.loads((kept / "manifest.json").read_text())["source"]["close_brackets"] is True


def test_the_command_line_option_and_its_rebuild_command(tmp_path):
    from data_prep.__main__ import main

    assert main(["listops", "--out", str(tmp_path), "--train", "20", "--val", "3", "--test", "3",
                 "--min-length", "10", "--max-length", "40", "--no-close-brackets"]) == 0
    assert not (load_split(tmp_path / "listops", "train", rebuild_cmd="").tokens == END_ID).any()
    assert generate_command(tmp_path, close_brackets=False, train=1).endswith("--train 1 --no-close-brackets")
    with pytest.raises(ValueError, match="TSV form needs its ] tokens"):
        listops.generate(tmp_path / "t", **SMALL, close_brackets=False, fmt="tsv", log=lambda _: None)


def test_a_run_refuses_listops_made_with_the_other_bracket_setting(tmp_path):
    from lra.tasks.listops import DataModule

    listops.generate(tmp_path, **SMALL, log=lambda _: None)
    options = [f"task.data.generate.{k}={v}" for k, v in SMALL.items()] + [f"data_dir={tmp_path}", "task.max_len=64"]
    DataModule(compose_run(options)).prepare_data()  # same settings: accepted
    with pytest.raises(UserError, match="close_brackets=False .the data has True."):
        DataModule(compose_run(options + ["task.data.generate.close_brackets=false"])).prepare_data()
