"""File names made from settings stay short enough to write (issue 58, point 9): a config-drift section of many
settings once crashed `python -m results` with `OSError [Errno 36] File name too long`."""

from __future__ import annotations

import os

import pytest

from lra.config import compose
from results.__main__ import main
from results.plots import STEM_LIMIT, figure_name, file_stem
from tests.results.records import write_record

# the command, after task=listops attention=linear experiment=quick, and three more (headings leave out
# the trainer keys that follow task.max_steps and task.eval_every)
DRIFT = ["task.max_steps=20", "task.eval_every=10", "task.optim.lr=0.002", "task.optim.warmup_steps=5",
         "task.optim.weight_decay=0.05", "model.dim=32", "model.ffn_dim=64", "model.dropout=0.2",
         "task.batching=length_grouped", "model.depth=3", "task.optim.schedule=constant", "task.optim.eps=1e-07"]
NAME_MAX = os.pathconf("/", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255


def test_a_long_drift_section_gets_its_plots_and_tables(tmp_path):
    config = compose(["task=listops", "attention=linear", "experiment=quick", *DRIFT])
    write_record(tmp_path / "runs", "listops", "linear", 0, 0.3, tag="quick", config=config)
    write_record(tmp_path / "runs", "listops", "linear", 1, 0.3, tag="long",
                 config={"tag": "t" * 300, "seed": 1})  # a record's own tag, as long
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables"), "--html"]) == 0
    section = next(line for line in (tmp_path / "tables" / "lra.md").read_text().splitlines()
                   if line.startswith("## tag `quick · "))
    assert len(section) > NAME_MAX  # the section name alone is over what a file name can hold
    assert len(list((tmp_path / "tables").glob(f"lra_{'t' * 147}-*_accuracy.png"))) == 1
    written = sorted(p.name for p in (tmp_path / "tables").glob("lra_quick*.png"))
    assert [name.rsplit("_", 1)[1] for name in written] == ["accuracy.png", "time.png"]
    assert all(len(name) <= 4 + STEM_LIMIT + len("_curves_by_tag.png") for name in written)
    assert all(name.startswith("lra_quick_model.depth_3_model.dim_32_") for name in written)


@pytest.mark.parametrize("tag", ["quick", "default_task.optim.lr_0.0001",
                                 "default · task.batching=length_grouped, task.eval_every=250"])
def test_short_names_keep_their_committed_spelling(tag):
    plain = tag.replace(" · ", "_").replace(", ", "_").replace("=", "_")
    assert file_stem(tag) == plain and figure_name(tag, "accuracy") == f"lra_{plain}_accuracy.png"


def test_long_names_stay_apart_and_within_the_limit():
    first, second = ("quick · " + ", ".join(f"model.setting_{i}={i}" for i in range(40)) + end for end in "ab")
    stems = file_stem(first), file_stem(second)
    assert stems[0] != stems[1] and all(len(stem) == STEM_LIMIT for stem in stems)
    assert stems[0][:100] == file_stem(first[:150])[:100]  # a readable prefix
    assert len(f".{figure_name(first, 'curves_by_tag')}.abcdefgh.tmp".encode()) < 255  # the atomic writer's file
