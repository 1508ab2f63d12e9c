"""Nothing is lost: a run killed with SIGKILL after a checkpoint resumes to exactly the same result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import torch

from lra.sampling import EpochSampler
from tests.lra.conftest import ROOT, TINY


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


def command(run_dir, data_dir) -> list[str]:
    return [sys.executable, str(ROOT / "run.py"), "attention=linear", "experiment=quick", f"data_dir={data_dir}",
            *TINY, "task.max_steps=120", "task.eval_every=7", "trainer.enable_progress_bar=false",
            "trainer.log_every_n_steps=1", f"hydra.run.dir={run_dir}"]


def test_sigkill_after_first_checkpoint_then_rerun_gives_the_uninterrupted_result(tiny_data_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    reference = subprocess.run(command(tmp_path / "ref", tiny_data_dir), env=env, capture_output=True, text=True,
                               timeout=300)
    assert reference.returncode == 0, reference.stderr[-2000:]

    cut = tmp_path / "cut"
    proc = subprocess.Popen(command(cut, tiny_data_dir), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    last, sizes = cut / "checkpoints" / "last.ckpt", []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        sizes = (sizes + [last.stat().st_size if last.exists() else -1])[-3:]
        if len(sizes) == 3 and sizes[0] == sizes[1] == sizes[2] > 0:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (cut / "result.json").exists(), "the run finished before it could be killed"

    resumed = subprocess.run(command(cut, tiny_data_dir), env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stdout + resumed.stderr
    ref = json.loads((tmp_path / "ref" / "result.json").read_text())
    got = json.loads((cut / "result.json").read_text())
    assert got["steps"] == ref["steps"] == 120
    for metric in ("val_acc", "test_acc", "test_loss"):
        assert abs(got["metrics"][metric] - ref["metrics"][metric]) < 1e-6, metric
