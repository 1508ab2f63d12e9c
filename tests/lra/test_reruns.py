"""Reruns lose nothing and overwrite nothing: locked folders, kills in the test phase, damaged checkpoints, runs
shorter than their validation interval, diverged runs (completed runs: test_run_progress.py)."""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from lra.module import ClassificationModule
from lra.run.callbacks import StopOnDivergence
from lra.run.train import run
from lra.settings import Run
from lra_base.errors import Diverged, UserError
from lra_base.lock import LOCK_NAME, run_folder_lock
from tests.lra.conftest import TINY, compose_run


def tiny(data_dir, *overrides: str) -> Run:
    return compose_run(["attention=linear", "experiment=quick", f"data_dir={data_dir}", *TINY,
                        "trainer.enable_progress_bar=false", *overrides])


def test_a_second_run_in_a_busy_folder_stops_and_a_stale_lock_does_not_block(tiny_data_dir, tmp_path):
    cfg = tiny(tiny_data_dir, "task.max_steps=2", "task.eval_every=2")
    with run_folder_lock(tmp_path), pytest.raises(UserError, match=rf"in use by another run \(pid {os.getpid()} "):
        run(cfg, tmp_path)
    assert not (tmp_path / "result.json").exists()  # the running one owns the folder's record
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": int(dead.stdout), "host": "here", "started": "then"}))
    assert run(cfg, tmp_path)["status"] == "completed"  # the lock file of a killed run blocks nothing
    assert not (tmp_path / LOCK_NAME).exists()


class Killed(BaseException):
    pass


def metric_rows(run_dir) -> set[tuple]:
    """(step, name, value) of every training and validation value in ``metrics.csv``."""
    with (run_dir / "csv" / "metrics.csv").open(newline="") as file:
        return {(row["step"], name, value) for row in csv.DictReader(file) for name, value in row.items()
                if value and name.split("/")[0] in ("train", "val")}


def test_a_kill_in_the_test_phase_loses_no_rows_no_times_and_keeps_the_umask(tiny_data_dir, tmp_path, monkeypatch):
    cfg = tiny(tiny_data_dir, "task.max_steps=10", "task.eval_every=5", "trainer.log_every_n_steps=1")
    reference = run(cfg, tmp_path / "reference")

    def killed(self, batch, batch_idx):
        raise Killed  # stands in for SIGKILL: nothing of the test phase is written

    with monkeypatch.context() as patch:
        patch.setattr(ClassificationModule, "test_step", killed)
        with pytest.raises(Killed):
            run(cfg, tmp_path / "killed")
    mask = os.umask(0o002)
    try:
        resumed = run(cfg, tmp_path / "killed")  # resumes at step 10 and only tests
    finally:
        os.umask(mask)
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "reference")
    assert resumed["metrics"] == reference["metrics"]
    assert resumed["earlier_segments_s"] > 0 and resumed["fit_time_s"] >= resumed["earlier_segments_s"]
    tokens = resumed["tokens_per_s"] * resumed["fit_time_s"]
    assert tokens == pytest.approx(reference["tokens_per_s"] * reference["fit_time_s"])  # every step's tokens
    for name in ("result.json", "csv/metrics.csv"):
        assert (tmp_path / "killed" / name).stat().st_mode & 0o777 == 0o664, name


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_damaged_last_ckpt_names_the_file_and_the_way_out(tiny_data_dir, tmp_path, damage):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    torch.save({"global_step": 7, "state_dict": {"w": torch.zeros(1000)}}, checkpoints / "best-step7.ckpt")
    whole = (checkpoints / "best-step7.ckpt").read_bytes()
    (checkpoints / "last.ckpt").write_bytes(b"" if damage == "empty" else whole[: len(whole) // 2])
    last = checkpoints / "last.ckpt"
    with pytest.raises(UserError) as error:
        run(tiny(tiny_data_dir, "task.max_steps=2"), tmp_path)
    message = str(error.value)
    assert f"{last} cannot be read" in message and f"mv {last} {last}.corrupt" in message
    assert f"cp {checkpoints / 'best-step7.ckpt'} {last}" in message
    assert not (tmp_path / "result.json").exists()  # refused before training: no record


@pytest.mark.parametrize("override", ["trainer.max_steps=3", "task.max_steps=3"])
def test_a_run_shorter_than_its_validation_interval_validates_at_its_end(tiny_data_dir, tmp_path, caplog, override):
    cfg = tiny(tiny_data_dir, override)  # quick validates every 250 steps
    with caplog.at_level(logging.WARNING, logger="lra.run.train"):
        record = run(cfg, tmp_path)
    assert "max_steps=3 ends before the first validation" in caplog.text and "task.eval_every" in caplog.text
    assert record["status"] == "completed" and record["steps"] == 3
    assert record["metrics"]["val_acc"] is not None and record["best_checkpoint"].endswith("best-step3.ckpt")


def test_a_diverging_run_stops_with_status_diverged(tiny_data_dir, tmp_path):
    cfg = tiny(tiny_data_dir, "task.optim.lr=1e6", "task.max_steps=60", "task.eval_every=30")
    with pytest.raises(Diverged, match=r"training loss is nan at step (\d+).*Lower task.optim.lr \(now 1e\+06\)"):
        run(cfg, tmp_path)
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "diverged" and "task.optim.lr" in record["error"]


@pytest.mark.parametrize("stage, key", [("validation", "val/loss"), ("test", "test/loss")])
def test_a_non_finite_evaluation_loss_stops_the_run(stage, key):
    trainer = SimpleNamespace(callback_metrics={key: torch.tensor(float("inf"))}, global_step=5)
    hook = StopOnDivergence("hint").on_validation_end if stage == "validation" else StopOnDivergence("hint").on_test_end
    with pytest.raises(Diverged, match=f"the {stage} loss is inf after step 5"):
        hook(trainer, None)


@pytest.mark.parametrize("mine, others, stops", [(1.0, False, False), (1.0, True, True), (float("nan"), False, True)])
def test_under_ddp_every_rank_stops_when_one_diverges(mine, others, stops):
    """The ranks decide together (a rank raising alone would leave the others waiting in the next all-reduce)."""
    asked = []

    def reduce_boolean_decision(decision: bool, all: bool = True) -> bool:
        asked.append((decision, all))
        return decision or others

    trainer = SimpleNamespace(world_size=2, global_step=7, log_every_n_steps=1,
                              strategy=SimpleNamespace(reduce_boolean_decision=reduce_boolean_decision))
    hook, cpu_module = StopOnDivergence("hint").on_train_batch_end, SimpleNamespace(device=torch.device("cpu"))
    if stops:
        with pytest.raises(Diverged, match="at step 7"):
            hook(trainer, cpu_module, {"loss": torch.tensor(mine)}, None, 0)
    else:
        hook(trainer, cpu_module, {"loss": torch.tensor(mine)}, None, 0)
    assert asked == [(mine != mine, False)]  # this rank's verdict, stopping if any rank says so
