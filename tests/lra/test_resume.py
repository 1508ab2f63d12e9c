"""Nothing is lost: a run stopped by SIGKILL or SIGTERM resumes to exactly the uninterrupted result."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from pytorch_lightning.utilities.exceptions import SIGTERMException

from lra.run.callbacks import CheckpointOnPreemption, sent_signal, stop_signal
from lra.run.train import run
from lra.sampling import EpochSampler
from lra.settings import Run
from tests.lra.conftest import ROOT, TINY, compose_run, signal_at_step


def test_epoch_sampler_is_a_function_of_seed_and_epoch_and_resumes_mid_epoch():
    sampler = EpochSampler(10, seed=3)
    first = list(sampler)
    assert sorted(first) == list(range(10)) and list(EpochSampler(10, seed=3)) == first
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first
    state = torch.get_rng_state()
    sampler.resume_at(epoch=1, consumed=4)
    assert list(sampler) == second[4:] and list(sampler) == second  # the skip applies to one pass
    sampler.resume_at(epoch=0, consumed=4)
    assert list(sampler) == second  # a stale resume point for another epoch is ignored
    assert torch.equal(state, torch.get_rng_state())
    whole = EpochSampler(10, seed=3, whole=4)  # whole batches of 4: the epoch's last 2 are left out
    assert len(whole) == 8 and list(whole) == first[:8]


def command(run_dir, data_dir) -> list[str]:
    return [sys.executable, str(ROOT / "run.py"), "attention=linear", "experiment=quick", f"data_dir={data_dir}",
            *TINY, "task.max_steps=120", "task.eval_every=7", "trainer.enable_progress_bar=false",
            "trainer.log_every_n_steps=1", f"hydra.run.dir={run_dir}"]


ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def reference(tiny_data_dir, tmp_path_factory) -> dict:
    """The record of an uninterrupted run of ``command``."""
    run_dir = tmp_path_factory.mktemp("reference")
    done = subprocess.run(command(run_dir, tiny_data_dir), env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((run_dir / "result.json").read_text())


def start_and_stop_after_first_checkpoint(run_dir, data_dir, sig: int) -> subprocess.CompletedProcess:
    """Start a run, send ``sig`` once ``last.ckpt`` exists and is stable, wait for the process to end."""
    proc = subprocess.Popen(command(run_dir, data_dir), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    last, sizes = run_dir / "checkpoints" / "last.ckpt", []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        sizes = (sizes + [last.stat().st_size if last.exists() else -1])[-3:]
        if len(sizes) == 3 and sizes[0] == sizes[1] == sizes[2] > 0:
            break
        time.sleep(0.02)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def rerun_and_compare(run_dir, data_dir, reference: dict) -> None:
    resumed = subprocess.run(command(run_dir, data_dir), env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stdout + resumed.stderr
    got = json.loads((run_dir / "result.json").read_text())
    assert got["status"] == "completed" and got["steps"] == reference["steps"] == 120
    for metric in ("val_acc", "test_acc", "test_loss"):
        assert abs(got["metrics"][metric] - reference["metrics"][metric]) < 1e-6, metric


def test_sigkill_after_first_checkpoint_then_rerun_gives_the_uninterrupted_result(reference, tiny_data_dir,
                                                                                   tmp_path):
    start_and_stop_after_first_checkpoint(tmp_path, tiny_data_dir, signal.SIGKILL)
    assert not (tmp_path / "result.json").exists(), "the run finished before it could be killed"
    rerun_and_compare(tmp_path, tiny_data_dir, reference)
    # every validation is in metrics.csv, the ones before the checkpoint too (before: held in memory, lost with
    # the process, and a resume keeps only the file's rows before its step)
    assert validation_steps(tmp_path) == validation_steps(Path(reference["run_dir"])) == list(range(6, 120, 7))


def validation_steps(run_dir: Path) -> list[int]:
    with (run_dir / "csv" / "metrics.csv").open(newline="") as file:
        return [int(row["step"]) for row in csv.DictReader(file) if row.get("val/acc")]


def test_sigterm_saves_a_checkpoint_exits_cleanly_and_the_rerun_completes(tiny_data_dir, tmp_path):
    """Preemption from outside, at a random moment: a checkpoint at the end of the batch, exit 143, an
    ``interrupted`` record, and a rerun that resumes and completes (exactness: the in-process test below)."""
    stopped = start_and_stop_after_first_checkpoint(tmp_path, tiny_data_dir, signal.SIGTERM)
    assert stopped.returncode == 143 and "rerun the same command to resume" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "interrupted"
    assert (tmp_path / "checkpoints" / "last.ckpt").exists()
    resumed = subprocess.run(command(tmp_path, tiny_data_dir), env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stdout + resumed.stderr
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "completed" and record["steps"] == 120
    printed = stopped.stdout + stopped.stderr + resumed.stdout + resumed.stderr
    for noise in NOISE:  # Lightning's messages that do not apply to these runs
        assert noise not in printed, noise
    assert "record: " in (tmp_path / "run.log").read_text()  # run.log ends with the metrics line


NOISE = ("litlogger", "LeafSpec", "`weights_only` was not set", "exists and is not empty", "not resumable")


def test_ctrl_c_saves_a_checkpoint_prints_the_rerun_command_and_exits_130(tiny_data_dir, tmp_path):
    stopped = start_and_stop_after_first_checkpoint(tmp_path, tiny_data_dir, signal.SIGINT)
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert "interrupted (Ctrl-C, SIGINT)" in stopped.stderr and "rerun the same command to resume" in stopped.stderr
    assert f"python {ROOT / 'run.py'} attention=linear" in stopped.stderr and "Traceback" not in stopped.stderr
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "interrupted" and "Ctrl-C" in record["error"]
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] > 0 and not (tmp_path / "run.lock").exists()


LOG_EVERY = 2


def in_process_config(data_dir) -> Run:
    """``command``'s run, shorter: 160 examples in batches of 32 (5 per epoch), validation every 7 steps."""
    return compose_run(["attention=linear", "experiment=quick", f"data_dir={data_dir}", *TINY, "task.max_steps=40",
                        "task.eval_every=7", "trainer.enable_progress_bar=false",
                        f"trainer.log_every_n_steps={LOG_EVERY}"])


@pytest.fixture(scope="module")
def in_process_reference(tiny_data_dir, tmp_path_factory) -> dict:
    return run(in_process_config(tiny_data_dir), tmp_path_factory.mktemp("in_process_reference"))["metrics"]


@pytest.mark.parametrize("hook, step, signum", [("on_train_batch_start", 11, signal.SIGTERM),
                                                ("on_train_batch_start", 9, signal.SIGTERM),
                                                ("on_validation_batch_start", 14, signal.SIGTERM),
                                                ("on_train_batch_start", 11, signal.SIGINT),
                                                ("on_train_batch_start", 11, signal.SIGUSR1)],
                         ids=["mid-epoch", "last batch of an epoch", "inside validation", "ctrl-c mid-epoch",
                              "sigusr1 mid-epoch"])
def test_sigterm_at_any_point_then_rerun_gives_the_uninterrupted_result(hook, step, signum, in_process_reference,
                                                                         tiny_data_dir, tmp_path, monkeypatch):
    """SIGTERM (or Ctrl-C) sent to itself while step ``step`` trains (or validates), then the same run again."""
    cfg = in_process_config(tiny_data_dir)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGUSR1)}
    with monkeypatch.context() as patch:
        patch.setattr(CheckpointOnPreemption, hook, signal_at_step(step, signum), raising=False)
        with pytest.raises(SIGTERMException) as stopped:
            run(cfg, tmp_path)
    assert stop_signal(stopped.value) == (signal.SIGTERM if signum == signal.SIGUSR1 else signum)  # exits as SIGTERM
    assert sent_signal(stopped.value) == signum
    interrupted = json.loads((tmp_path / "result.json").read_text())
    assert interrupted["status"] == "interrupted"
    assert ("Ctrl-C" in interrupted["error"]) == (signum == signal.SIGINT)
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers  # restored after the run
    got = run(cfg, tmp_path)
    assert got["steps"] == 40
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers  # before, SIGUSR1's stayed the run's
    with (tmp_path / "csv" / "metrics.csv").open(newline="") as file:  # the interrupted run's rows are kept
        logged = [int(row["step"]) for row in csv.DictReader(file) if row.get("train/loss")]
    assert logged == list(range(LOG_EVERY - 1, 40, LOG_EVERY))  # Lightning logs after every LOG_EVERY steps
    for metric in ("val_acc", "test_acc", "test_loss"):
        assert got["metrics"][metric] == in_process_reference[metric], metric


def test_a_moved_or_copied_run_folder_resumes_with_its_own_checkpoints(in_process_reference, tiny_data_dir,
                                                                        tmp_path, monkeypatch):
    """Interrupted after its last validation (step 35 of 40), the folder is copied (b) and moved (c): each
    resumes exactly and tests its own best checkpoint with its recorded score."""
    cfg = in_process_config(tiny_data_dir)
    with monkeypatch.context() as patch:
        patch.setattr(CheckpointOnPreemption, "on_train_batch_start", signal_at_step(38), raising=False)
        with pytest.raises(SIGTERMException):
            run(cfg, tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "a").rename(tmp_path / "c")
    for folder in ("b", "c"):
        got = run(cfg, tmp_path / folder)
        assert Path(got["best_checkpoint"]).parent == tmp_path / folder / "checkpoints"
        for metric in ("val_acc", "test_acc", "test_loss"):
            assert got["metrics"][metric] == in_process_reference[metric], (folder, metric)
    assert not (tmp_path / "a").exists()
