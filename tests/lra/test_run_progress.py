"""A run's cost counts every segment: an interrupted-then-resumed run records the sum of its segments' time and
all its training tokens; a finished run folder is left alone unless ``rerun=true``."""

from __future__ import annotations

import json

import pytest
import torch
from pytorch_lightning.utilities.exceptions import SIGTERMException

from lra.run.callbacks import CheckpointOnPreemption
from lra.run.train import run
from lra.settings import Run
from tests.lra.conftest import TINY, compose_run, signal_at_step


def config(data_dir, *extra) -> Run:
    return compose_run(["attention=linear", "experiment=quick", f"data_dir={data_dir}", *TINY, "task.max_steps=20",
                        "task.eval_every=7", "trainer.enable_progress_bar=false", *extra])


def tokens_trained(record: dict) -> float:
    return record["tokens_per_s"] * record["fit_time_s"]


def test_a_resumed_run_records_all_segments_time_and_tokens(tiny_data_dir, tmp_path, monkeypatch):
    whole = run(config(tiny_data_dir), tmp_path / "whole")

    with monkeypatch.context() as patch:
        patch.setattr(CheckpointOnPreemption, "on_train_batch_start", signal_at_step(9), raising=False)
        with pytest.raises(SIGTERMException):
            run(config(tiny_data_dir), tmp_path / "split")
    saved = torch.load(tmp_path / "split" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    first_segment = saved["run_progress"]["fit_seconds"]
    assert first_segment > 0 and saved["run_progress"]["train_tokens"] > 0
    interrupted = json.loads((tmp_path / "split" / "result.json").read_text())
    assert interrupted["earlier_segments_s"] == 0.0 and interrupted["fit_time_s"] >= first_segment
    resumed = run(config(tiny_data_dir), tmp_path / "split")
    assert resumed["earlier_segments_s"] == pytest.approx(first_segment)
    assert resumed["fit_time_s"] > first_segment and resumed["wall_time_s"] > resumed["fit_time_s"]
    assert tokens_trained(resumed) == pytest.approx(tokens_trained(whole))  # every step's tokens, once


def test_a_completed_run_is_left_alone_and_rerun_true_starts_again(tiny_data_dir, tmp_path):
    first = run(config(tiny_data_dir), tmp_path)
    record = (tmp_path / "result.json").read_text()
    again = run(config(tiny_data_dir), tmp_path)
    assert again["already_completed"] and again["metrics"] == first["metrics"]
    assert (tmp_path / "result.json").read_text() == record  # not rewritten
    redo = run(config(tiny_data_dir, "rerun=true"), tmp_path)
    assert redo["status"] == "completed" and "already_completed" not in redo
    assert redo["earlier_segments_s"] == 0.0  # trained from scratch, not resumed
    (replaced,) = (tmp_path / "replaced").iterdir()
    assert json.loads((replaced / "result.json").read_text())["finished_at"] == first["finished_at"]
    assert (replaced / "checkpoints" / "last.ckpt").exists()


def test_without_a_progress_bar_each_validation_prints_one_progress_line(tiny_data_dir, tmp_path, capfd):
    run(config(tiny_data_dir), tmp_path / "run")
    lines = [line for line in capfd.readouterr().err.splitlines() if "val_acc" in line and "min elapsed" in line]
    assert [line.split(" step ")[1].split(" ")[0] for line in lines] == ["7/20", "14/20"]  # every 7 steps
    assert lines[0].startswith("listops/linear/seed0 (run): step 7/20 val_acc ") and "min to go" in lines[0]
    accs = [float(line.split("val_acc ")[1].split(" ")[0]) for line in lines]
    assert float(lines[1].split("(best ")[1].split(")")[0]) == max(accs)


def test_each_segment_names_its_first_step_and_machine(tiny_data_dir, tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(CheckpointOnPreemption, "on_train_batch_start", signal_at_step(9), raising=False)
        with pytest.raises(SIGTERMException):
            run(config(tiny_data_dir), tmp_path)
    stopped = json.loads((tmp_path / "result.json").read_text())
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert stopped["status"] == "interrupted" and stopped["steps"] == saved["global_step"] == 10
    assert [segment["from_step"] for segment in stopped["segments"]] == [0]  # how far it got, and where
    assert 0 < stopped["fit_time_s"] <= stopped["wall_time_s"] and stopped["tokens_per_s"] > 0
    resumed = run(config(tiny_data_dir), tmp_path)
    first, second = resumed["segments"]
    assert first["from_step"] == 0 and 0 < second["from_step"] < 20
    for segment in (first, second):
        assert segment["device"] == "cpu" and segment["processes"] == 1
        assert segment["cores"] >= 1 and segment["threads"] >= 1 and segment["cpu"]
        assert segment["precision"] == "32-true" and segment["torch"] == torch.__version__  # every record says
    assert json.loads((tmp_path / "result.json").read_text())["segments"] == resumed["segments"]
