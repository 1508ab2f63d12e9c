"""The step-memory benchmark's code paths on toy sizes (no memory or time is asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import step_memory


def test_default_attentions_are_the_zoos_linear_time_mechanisms():
    chosen = set(step_memory.linear_time_attentions())
    assert {"llops", "linear", "nystrom", "performer"} <= chosen
    assert not chosen & {"softmax", "synthesizer", "yat"}  # quadratic, each by its class's declaration


def test_peak_probe_reads_this_process():
    resident = step_memory.status_bytes("VmRSS") or 0  # read first: the process may grow a page in between
    assert step_memory.peak_bytes() >= resident > 0


def test_fit_scales_the_steps_memory_to_the_judged_batch():
    row = {"status": "ok", "batch": 8, "rss_before_mb": 500.0, "step_peak_mb": 800.0}
    fitted = step_memory.with_fit(row, 32, 4.0)
    assert fitted["peak_at_fit_mb"] == pytest.approx(500 + 4 * 800) and fitted["fits"] and fitted["extrapolated"]
    assert not step_memory.with_fit({**row, "step_peak_mb": 1000.0}, 32, 4.0)["fits"]  # 4,500 MiB
    assert not step_memory.with_fit({"status": "timeout after 1 s"}, 32, 4.0)["fits"]
    parts = step_memory.with_fit({**row, "micro_batches": 4}, 32, 4.0)  # a step holds one part of 8 at a time
    assert parts["peak_at_fit_mb"] == pytest.approx(500 + 800) and not parts["extrapolated"]


def test_each_cell_runs_in_a_fresh_process(tmp_path, capsys):
    code = step_memory.main(["--tasks", "retrieval", "--attentions", "linear", "llops", "--batch", "2",
                             "--out", str(tmp_path), "experiment=quick"])
    assert code == 0
    frame = pd.read_csv(tmp_path / "step_memory.csv")
    assert list(frame.attention) == ["linear", "llops"] and (frame.status == "ok").all()
    assert (frame.length == 256).all() and (frame.batch == 2).all() and frame.extrapolated.all()
    assert frame.peak_rss_mb.tolist() == pytest.approx((frame.rss_before_mb + frame.step_peak_mb).tolist())
    assert "2 of 2 cells fit" in capsys.readouterr().out


def test_a_cell_over_the_guard_is_reported_not_raised(tmp_path):
    # no process with torch imported has a data segment under 50 MiB: over the cap when training starts
    code = step_memory.main(["--tasks", "retrieval", "--attentions", "linear", "--batch", "2", "--guard-gib", "0.05",
                             "--timeout", "300", "--out", str(tmp_path), "experiment=quick"])
    assert code == 0
    row = pd.read_csv(tmp_path / "step_memory.csv").iloc[0]
    assert row.status == "over the 0.05 GiB guard" and not row.fits


def test_the_guard_caps_what_the_steps_allocate():
    # in a fresh process: the probe caps the data segment 64 MiB above its size when training starts
    script = """
import torch
from benchmarks import step_memory
probe = step_memory.PeakProbe(step_memory.status_bytes("VmData") + 64 * 2**20)
probe.on_train_start(None, None)
small = torch.ones(2**20)  # 4 MiB fits
try:
    torch.ones(2**27)  # 512 MiB does not
except RuntimeError as err:
    print("refused:", "can't allocate memory" in str(err))
"""
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.stdout.strip() == "refused: True", done.stderr[-2000:]
