"""Two DDP processes on the CPU: one record, and a run killed after its first checkpoint resumes exactly (each
rank's share of the epoch and its own dropout masks continue where they were)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from analyses.listops_root import measure
from tests.lra.conftest import ROOT, TINY

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"}


def command(run_dir, data_dir) -> list[str]:
    """12 steps of 32 (16 a rank) on 160 trees, validation every 4: the first checkpoint is mid-epoch."""
    return [sys.executable, str(ROOT / "run.py"), "trainer=ddp_cpu", "attention=linear", "experiment=quick",
            f"data_dir={data_dir}", *TINY, "task.max_steps=12", "task.eval_every=4",
            "trainer.enable_progress_bar=false", f"hydra.run.dir={run_dir}"]


@pytest.fixture(scope="module")
def reference(tiny_data_dir, tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    run_dir = tmp_path_factory.mktemp("ddp_reference")
    done = subprocess.run(command(run_dir, tiny_data_dir), cwd=run_dir, env=ENV, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done, json.loads((run_dir / "result.json").read_text()), run_dir


def test_two_cpu_processes_write_one_record(reference):
    done, record, _ = reference
    assert done.stdout.count("test_acc=") == 1  # rank zero reports
    assert record["status"] == "completed" and record["steps"] == 12
    assert record["config"]["trainer"]["strategy"] == "ddp" and record["config"]["trainer"]["devices"] == 2
    (segment,) = record["segments"]  # one segment, on the CPU, in two processes
    assert segment["from_step"] == 0 and segment["device"] == "cpu" and segment["processes"] == 2


def test_the_ranks_evaluate_every_tree_once(reference):
    """The record's accuracies (each rank scores its share of a split, the metric adds them up) are those of one
    process scoring the whole split with the best checkpoint."""
    _, record, run_dir = reference
    for row in measure(run_dir, ["test", "val"], None):
        assert row["recorded_acc"] is not None and abs(row["acc"] - row["recorded_acc"]) <= 0.01, row


def rank_one(launcher: int) -> int:
    """The pid of rank one: the one child of rank zero's process that runs ``run.py`` (Lightning's launcher)."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    ranks = [int(pid) for pid in children if "run.py" in Path(f"/proc/{pid}/cmdline").read_text()]
    assert len(ranks) == 1, children
    return ranks[0]


def stop_after_first_checkpoint(run_dir, data_dir, sig: int, *, to: str) -> subprocess.CompletedProcess:
    """Start the run, send ``sig`` once ``last.ckpt`` is written (``to`` both ranks, or rank ``zero`` or ``one``
    alone), wait for the run to end."""
    proc = subprocess.Popen(command(run_dir, data_dir), cwd=run_dir, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    last, sizes, deadline = run_dir / "checkpoints" / "last.ckpt", [], time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        sizes = (sizes + [last.stat().st_size if last.exists() else -1])[-3:]
        if len(sizes) == 3 and sizes[0] == sizes[1] == sizes[2] > 0:
            break
        time.sleep(0.02)
    if to == "both":
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid if to == "zero" else rank_one(proc.pid), sig)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"signal {sig} to {to}: the run hung") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def rerun_matches_the_reference(run_dir, data_dir, reference) -> None:
    """The rerun resumes and ends where the uninterrupted run did: metrics, weights, every rank's random state."""
    resumed = subprocess.run(command(run_dir, data_dir), cwd=run_dir, env=ENV, capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stdout + resumed.stderr
    got, want = json.loads((run_dir / "result.json").read_text()), reference[1]
    assert got["status"] == "completed" and got["steps"] == want["steps"] == 12
    for metric in ("val_acc", "test_acc", "test_loss"):
        assert abs(got["metrics"][metric] - want["metrics"][metric]) < 1e-6, metric
    ours, theirs = (torch.load(d / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
                    for d in (run_dir, reference[2]))  # step 12: trained after the resume
    assert ours["global_step"] == theirs["global_step"] == 12
    assert torch.equal(ours["torch_rng_states"], theirs["torch_rng_states"])  # every rank's masks went on the same
    for name, weight in theirs["state_dict"].items():
        assert torch.allclose(ours["state_dict"][name], weight, rtol=0, atol=1e-6), name


def test_a_run_killed_after_its_first_checkpoint_resumes_exactly(reference, tiny_data_dir, tmp_path):
    stop_after_first_checkpoint(tmp_path, tiny_data_dir, signal.SIGKILL, to="both")  # as when the machine goes
    assert not (tmp_path / "result.json").exists(), "the run finished before it could be killed"
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["global_step"] in (4, 8) and saved["torch_rng_states"].shape[0] == 2  # mid-epoch (5 steps an epoch)
    assert not torch.equal(saved["torch_rng_states"][0], saved["torch_rng_states"][1])  # each rank its own
    rerun_matches_the_reference(tmp_path, tiny_data_dir, reference)


@pytest.mark.parametrize("to", ["zero", "one"])
def test_sigterm_to_one_rank_stops_both_after_the_same_batch(reference, tiny_data_dir, tmp_path, to):
    """Preemption reaching one process (Lightning forwards rank zero's to the others; rank one's it does not):
    the ranks agree to stop after the same batch, rank zero saves and reports once, exit 143, and the rerun
    ends where the uninterrupted run did."""
    stopped = stop_after_first_checkpoint(tmp_path, tiny_data_dir, signal.SIGTERM, to=to)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert stopped.stderr.count("stopped by SIGTERM: last.ckpt") == 1 and "train_ddp_process" not in stopped.stderr
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "interrupted"
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert 4 <= saved["global_step"] < 12 and saved["torch_rng_states"].shape[0] == 2
    rerun_matches_the_reference(tmp_path, tiny_data_dir, reference)


def test_a_diverging_ddp_run_stops_on_every_rank(tiny_data_dir, tmp_path):
    """Rank zero records ``diverged`` and both processes end (here both ranks' losses go non-finite at once; one
    rank alone diverging is tests/lra/test_reruns.py's ``test_under_ddp_every_rank_stops_when_one_diverges``)."""
    args = [a for a in command(tmp_path, tiny_data_dir) if not a.startswith(("task.max_steps", "task.eval_every"))]
    done = subprocess.run([*args, "task.optim.lr=1e6", "task.max_steps=60", "task.eval_every=30"], cwd=tmp_path,
                          env=ENV, capture_output=True, text=True, timeout=300)
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "diverged" and "task.optim.lr" in record["error"], done.stderr[-2000:]
    assert done.returncode != 0
