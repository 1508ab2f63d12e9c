"""The layer summary a run prints leaves out the FLOPs Lightning did not count (it printed 0 FLOPs a layer)."""

from __future__ import annotations

import logging

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.model_summary import summarize
from torch import nn

from lra.run.model_summary import CountedModelSummary, summary_callbacks
from lra.run.train import run
from tests.lra.conftest import TINY, compose_run


class Tiny(pl.LightningModule):
    def __init__(self, example: bool):
        super().__init__()
        self.layer = nn.Linear(4, 3)
        self.example_input_array = torch.zeros(2, 4) if example else None

    def forward(self, x):
        return self.layer(x)


def printed_summary(module: pl.LightningModule, caplog) -> str:
    summary = summarize(module, max_depth=1)
    with caplog.at_level(logging.INFO, logger="lra.run.model_summary"):
        CountedModelSummary.summarize(summary._get_summary_data(), summary.total_parameters,
                                      summary.trainable_parameters, summary.model_size, summary.total_training_modes,
                                      total_flops=summary.total_flops)
    return caplog.text


def test_flops_are_shown_only_where_lightning_counted_them(caplog):
    uncounted = printed_summary(Tiny(example=False), caplog)
    assert "Total params" in uncounted and "layer" in uncounted
    assert "FLOPs" not in uncounted and "Total Flops" not in uncounted
    caplog.clear()
    counted = printed_summary(Tiny(example=True), caplog)  # 2 x 4 x 3 multiply-adds: 48 FLOPs
    assert "FLOPs" in counted and "48        Total Flops" in counted


def test_lightnings_own_summary_is_replaced_or_stays_off():
    arguments, callbacks = summary_callbacks({"max_steps": 5})
    assert arguments == {"max_steps": 5, "enable_model_summary": False}
    assert [type(c) for c in callbacks] == [CountedModelSummary]
    assert summary_callbacks({"enable_model_summary": False})[1] == []
    assert summary_callbacks({"barebones": True})[1] == []
    assert [type(c) for c in summary_callbacks({"enable_model_summary": None})[1]] == [CountedModelSummary]


def test_a_run_prints_its_summary_without_a_flops_column(tiny_data_dir, tmp_path, caplog):
    config = compose_run(["attention=linear", "experiment=quick", f"data_dir={tiny_data_dir}", *TINY,
                          "task.max_steps=2", "task.eval_every=2", "trainer.enable_progress_bar=false"])
    with caplog.at_level(logging.INFO):
        assert run(config, tmp_path)["status"] == "completed"
    assert "Total params" in caplog.text and "encoder" in caplog.text
    assert "FLOPs" not in caplog.text and "Total Flops" not in caplog.text
