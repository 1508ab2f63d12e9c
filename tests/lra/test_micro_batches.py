"""``task.micro_batches``: a batch computed in accumulated parts trains like the whole batch (same examples per
optimizer step, same gradient up to float summation order), validates at the same optimizer steps, and halves
the activations a step holds; Retrieval's protocol uses it to fit 2 x 4,000 tokens x 32 pairs in 4 GiB."""

from __future__ import annotations

import csv

import pytest
import torch
from pytorch_lightning.utilities.exceptions import SIGTERMException

from lra.run.callbacks import CheckpointOnPreemption
from lra.run.train import run
from lra.settings import Run
from lra_base.errors import UserError
from tests.lra.conftest import TINY, compose_run, signal_at_step


def val_rows(run_dir) -> list[tuple[int, float]]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return [(int(r["step"]), float(r["val/loss"])) for r in csv.DictReader(f) if r.get("val/loss")]


def train_rows(run_dir) -> list[tuple[int, float, float]]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return [(int(r["step"]), float(r["train/loss"]), float(r["train/acc"])) for r in csv.DictReader(f)
                if r.get("train/loss")]


def test_micro_batches_train_like_the_whole_batch(tiny_data_dir, tmp_path):
    # 160 training trees in batches of 8: 20 steps an epoch, so 26 steps cross into a second epoch
    common = ["attention=linear", "experiment=quick", f"data_dir={tiny_data_dir}", *TINY, "model.dropout=0",
              "task.batch_size=8", "task.max_steps=26", "task.eval_every=13", "trainer.enable_progress_bar=false",
              "trainer.log_every_n_steps=1"]
    whole = run(compose_run(common), tmp_path / "whole")
    parts = run(compose_run([*common, "task.micro_batches=4"]), tmp_path / "parts")
    assert whole["status"] == parts["status"] == "completed"
    rows_whole, rows_parts = val_rows(tmp_path / "whole"), val_rows(tmp_path / "parts")
    assert [s for s, _ in rows_parts] == [s for s, _ in rows_whole] == [12, 25]  # optimizer steps, not parts
    assert [v for _, v in rows_parts] == pytest.approx([v for _, v in rows_whole], rel=1e-4)
    # the logged training loss and accuracy are the step's whole batch (before: its last part's)
    train_whole, train_parts = train_rows(tmp_path / "whole"), train_rows(tmp_path / "parts")
    assert [s for s, *_ in train_parts] == [s for s, *_ in train_whole] and len(train_whole) >= 2
    assert [v for _, v, _ in train_parts] == pytest.approx([v for _, v, _ in train_whole], rel=1e-4)
    assert [a for *_, a in train_parts] == pytest.approx([a for *_, a in train_whole], abs=1e-6)
    assert parts["metrics"] == pytest.approx(whole["metrics"], rel=1e-4)
    state = torch.load(tmp_path / "parts" / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 26
    assert parts["metrics"]["test_loss"] != pytest.approx(2.3026, rel=1e-3)  # it trained (not ln 10 at chance)


def test_micro_batches_scale_the_validation_interval_and_accumulate():
    retrieval = compose_run(["task=retrieval"])
    assert retrieval.task.micro_batches == 4 and retrieval.task.batch_size == 32
    args = retrieval.trainer_arguments
    assert args["accumulate_grad_batches"] == 4
    assert args["val_check_interval"] == 4 * retrieval.task.eval_every
    quick = compose_run(["task=retrieval", "experiment=quick"]).trainer_arguments
    assert "accumulate_grad_batches" not in quick and quick["val_check_interval"] == 500
    with pytest.raises(UserError, match=r"trainer.val_check_interval=0.5 \(a fraction of an epoch\)"):
        compose_run(["task=retrieval", "trainer.val_check_interval=0.5"])


def micro_config(data_dir) -> Run:
    """160 trees in batches of 32 as 2 parts of 16 (10 parts an epoch), validation every 7 steps."""
    return compose_run(["attention=linear", "experiment=quick", f"data_dir={data_dir}", *TINY, "task.max_steps=20",
                        "task.eval_every=7", "task.micro_batches=2", "trainer.enable_progress_bar=false"])


def test_a_stop_between_the_parts_of_a_batch_waits_for_its_last_part_and_resumes_exactly(tiny_data_dir, tmp_path,
                                                                                         monkeypatch):
    """The parts' summed gradients are not in a checkpoint: a SIGTERM during a batch's first part stops after
    its second, at an optimizer step, and the rerun gives the uninterrupted result."""
    reference = run(micro_config(tiny_data_dir), tmp_path / "reference")["metrics"]
    with monkeypatch.context() as patch:  # a batch with an even index is the first of its two parts
        patch.setattr(CheckpointOnPreemption, "on_train_batch_start", signal_at_step(11, every_nth_batch=2),
                      raising=False)
        with pytest.raises(SIGTERMException):
            run(micro_config(tiny_data_dir), tmp_path / "stopped")
    saved = torch.load(tmp_path / "stopped" / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 12  # after the part that completed step 12, not between the parts
    got = run(micro_config(tiny_data_dir), tmp_path / "stopped")
    assert got["status"] == "completed" and got["steps"] == 20
    for metric in ("val_acc", "test_acc", "test_loss"):
        assert got["metrics"][metric] == reference[metric], metric


def test_every_step_has_all_its_parts_when_the_epoch_is_not_whole_batches(tmp_path):
    """150 trees in batches of 8 as 4 parts: each epoch trains 18 whole batches (its last 6 trees, different
    ones each epoch, are left out), so validation and checkpoints fall on optimizer steps in every epoch."""
    cfg = compose_run(["attention=linear", "experiment=quick", f"data_dir={tmp_path / 'data'}", *TINY,
                       "task.data.generate.train=150", "task.batch_size=8", "task.micro_batches=4",
                       "task.max_steps=40", "task.eval_every=7", "trainer.enable_progress_bar=false"])
    record = run(cfg, tmp_path / "run")
    assert record["status"] == "completed" and record["steps"] == 40
    assert [s for s, _ in val_rows(tmp_path / "run")] == [6, 13, 20, 27, 34]
