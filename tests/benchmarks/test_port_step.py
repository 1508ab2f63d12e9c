"""The port benchmark's code paths on a stand-in port and toy sizes (the real port is never needed here)."""

from __future__ import annotations

import sys

import pandas as pd
import pytest
import torch

import benchmarks
from benchmarks import port_step

CONFIG = '''
listops = {"model": {"vocab_size": 32, "num_classes": 10, "max_seq_len": 2000},
           "extra_attn_config": {"softmax": {"bz_rate": 1}, "nystrom": {"num_landmarks": 128}}}
Config = {"lra-listops": listops}
'''
MODEL = '''
import torch
from torch import nn


class ModelForSC(nn.Module):
    """The port's call contract: (input_ids_0, mask_0, label) -> per-example loss and accuracy."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config["vocab_size"], 8)
        self.head = nn.Linear(8, config["num_classes"])

    def forward(self, input_ids_0, mask_0, label):
        scores = self.head((self.embed(input_ids_0) * mask_0[..., None]).sum(1) / mask_0.sum(1, keepdim=True))
        loss = nn.functional.cross_entropy(scores, label, reduction="none")
        return {"loss": loss, "accu": (scores.argmax(-1) == label).float()}
'''


@pytest.fixture()
def stand_in_port(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "config.py").write_text(CONFIG)
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "model_LRA.py").write_text(MODEL)
    yield tmp_path
    for name in ("config", "models", "models.model_LRA"):
        sys.modules.pop(name, None)


def test_port_config_is_its_listops_model_with_the_attention_options_on_the_cpu(stand_in_port):
    config, _ = port_step.load_port(stand_in_port)
    cfg = port_step.port_config(config, "nystrom", 2048)
    assert cfg["num_landmarks"] == 128 and cfg["attn_type"] == "nystrom"
    assert (cfg["max_seq_len"], cfg["device"], cfg["mixed_precision"]) == (2048, "cpu", False)
    assert port_step.port_config(config, "softmax", 100)["max_seq_len"] == 128  # a power of two, as main.py


def test_load_port_names_a_folder_that_is_not_the_port(tmp_path):
    with pytest.raises(SystemExit, match="not the port's src/ folder"):
        port_step.load_port(tmp_path)


def test_accumulated_port_step_equals_the_whole_batch_step(stand_in_port):
    config, model_for_sc = port_step.load_port(stand_in_port)
    batch = {"tokens": torch.randint(1, 16, (4, 8)), "labels": torch.randint(0, 10, (4,))}
    after = []
    for accumulate in (1, 2):
        torch.manual_seed(0)
        model = model_for_sc(port_step.port_config(config, "softmax", 8))
        port_step.port_step(model, port_step.adamw(model), batch, accumulate)
        after.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(after[0], after[1])


def test_checkpointed_attention_gives_the_same_step():
    batch = {"tokens": torch.randint(1, 16, (2, 16)), "lengths": torch.tensor([16, 11]),
             "labels": torch.tensor([1, 2])}
    grads = []
    for checkpointed in (False, True):
        torch.manual_seed(0)
        model = port_step.our_model("softmax", 16, ["model.dropout=0.0"], checkpointed)
        torch.nn.functional.cross_entropy(model(batch), batch["labels"]).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert isinstance(model.encoder.blocks[0].attention, port_step.Checkpointed)
    torch.testing.assert_close(grads[0], grads[1])


def test_port_step_writes_one_row_per_variant_of_ours(stand_in_port, tmp_path, capsys):
    code = port_step.main(["--port-src", str(stand_in_port), "--attentions", "softmax", "nystrom", "--batch", "2",
                           "--length", "16", "--steps", "1", "--warmup", "0", "--out", str(tmp_path / "out")])
    assert code == 0
    frame = pd.read_csv(tmp_path / "out" / "port_step.csv", keep_default_na=False)
    assert list(zip(frame.mechanism, frame.ours)) == [("softmax", "config"), ("softmax", "checkpoint"),
                                                      ("nystrom", "config"), ("nystrom", "port options")]
    assert list(frame.port_accumulate) == [4, 4, 1, 1]
    assert frame.ours_over_port.tolist() == pytest.approx((frame.ours_ms / frame.port_ms).tolist())
    assert frame.cpu_ours_over_port.tolist() == pytest.approx((frame.cpu_ours_ms / frame.cpu_port_ms).tolist())
    assert "ours / port" in capsys.readouterr().out


def test_port_step_wants_a_power_of_two_length(stand_in_port):
    with pytest.raises(SystemExit):
        port_step.main(["--port-src", str(stand_in_port), "--length", "100"])


def test_merge_replaces_only_the_remeasured_mechanisms(stand_in_port, tmp_path):
    common = ["--port-src", str(stand_in_port), "--batch", "2", "--length", "16", "--steps", "1", "--warmup", "0",
              "--out", str(tmp_path), "--checkpoint-ours"]
    assert port_step.main([*common, "--attentions", "softmax", "nystrom"]) == 0
    before = pd.read_csv(tmp_path / "port_step.csv", keep_default_na=False)
    assert port_step.main([*common, "--attentions", "softmax", "--merge"]) == 0
    after = pd.read_csv(tmp_path / "port_step.csv", keep_default_na=False)
    assert list(after.mechanism) == ["softmax", "nystrom", "nystrom"]  # the mechanisms' order, nystrom's rows kept
    pd.testing.assert_frame_equal(after[after.mechanism == "nystrom"].reset_index(drop=True),
                                  before[before.mechanism == "nystrom"].reset_index(drop=True))
    assert port_step.main([*common, "--attentions", "softmax"]) == 0  # without --merge: only what was measured
    assert list(pd.read_csv(tmp_path / "port_step.csv").mechanism) == ["softmax"]


def test_merge_refuses_rows_measured_otherwise_and_overrides_label_the_rows(stand_in_port, tmp_path, capsys):
    """Before, --merge put rows of another batch or thread count beside the new ones as one table, and a row run
    with model.dim=128 read as the config's."""
    common = ["--port-src", str(stand_in_port), "--length", "16", "--steps", "1", "--warmup", "0",
              "--out", str(tmp_path), "--checkpoint-ours"]
    assert port_step.main([*common, "--batch", "2", "--attentions", "softmax", "nystrom"]) == 0
    before = (tmp_path / "port_step.csv").read_bytes()
    with pytest.raises(SystemExit):
        port_step.main([*common, "--batch", "3", "--attentions", "softmax", "--merge"])
    err = capsys.readouterr().err
    assert "--merge would put rows measured with other settings" in err and "batch [2] -> 3" in err
    assert (tmp_path / "port_step.csv").read_bytes() == before
    assert port_step.main(["model.dropout=0.2", *common, "--batch", "2", "--attentions", "softmax"]) == 0
    assert set(pd.read_csv(tmp_path / "port_step.csv").our_options) == {"model.dropout=0.2"}


@pytest.mark.parametrize("kept_cpu", [None, "Other CPU (avx512)"])
def test_merge_refuses_rows_of_another_or_an_unrecorded_cpu(stand_in_port, tmp_path, capsys, kept_cpu):
    """Before, --merge put rows timed on another machine (or one the CSV did not name) beside this run's as one
    table; now each row names its CPU and --merge keeps only rows of this one."""
    common = ["--port-src", str(stand_in_port), "--batch", "2", "--length", "16", "--steps", "1", "--warmup", "0",
              "--out", str(tmp_path), "--checkpoint-ours"]
    assert port_step.main([*common, "--attentions", "softmax", "nystrom"]) == 0
    frame = pd.read_csv(tmp_path / "port_step.csv", keep_default_na=False)
    assert set(frame.processor) == {benchmarks.this_processor()}
    (frame.drop(columns="processor") if kept_cpu is None else frame.assign(processor=kept_cpu)).to_csv(
        tmp_path / "port_step.csv", index=False)
    before = (tmp_path / "port_step.csv").read_bytes()
    with pytest.raises(SystemExit):
        port_step.main([*common, "--attentions", "softmax", "--merge"])
    err = capsys.readouterr().err
    assert ("processor not recorded" if kept_cpu is None else f"processor ['{kept_cpu}']") in err
    assert (tmp_path / "port_step.csv").read_bytes() == before
