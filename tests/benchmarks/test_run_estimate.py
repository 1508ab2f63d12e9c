"""The whole-run estimate runs end to end on a tiny generated ListOps (no timing is asserted)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from benchmarks import run_estimate
from benchmarks.flops import counter

TINY = ["task.data.generate.train=160", "task.data.generate.val=64", "task.data.generate.test=40",
        "task.data.generate.min_length=20", "task.data.generate.max_length=60"]


def test_sample_batches_takes_the_middle_batch_of_each_group_and_keeps_batches_whole():
    order = list(range(10))  # batches of 3: [0 1 2] [3 4 5] [6 7 8] [9]
    assert run_estimate.sample_batches(order, 3, 2) == ([3, 4, 5, 9], 2, 4)
    assert run_estimate.sample_batches(order, 3, 1) == (order, 4, 4)
    assert run_estimate.sample_batches(order, 3, 9) == ([0, 1, 2], 1, 4)  # fewer batches than a group


def test_run_estimate_adds_steps_validations_and_the_test_pass(tmp_path, capsys):
    code = run_estimate.main(["--attentions", "linear", "llops", "--steps", "1", "--warmup", "1", "--every", "2",
                              "--target-min", "1", "--out", str(tmp_path / "out"), "experiment=quick",
                              f"data_dir={tmp_path / 'data'}", "task.max_steps=40", "task.eval_every=10",
                              "task.batch_size=8", *TINY])
    assert code == 0
    frame = pd.read_csv(tmp_path / "out" / "run_estimate.csv")
    assert list(frame.attention) == ["linear", "llops"]
    row = frame.iloc[0]
    assert (row.steps, row.validations, row.val_batches, row.val_timed, row.test_batches, row.test_timed) == (
        40, 4, 8, 4, 5, 2)
    assert row.total_min == pytest.approx(row.train_min + row.validation_min + row.test_min)
    assert row.train_min == pytest.approx(40 * row.step_s / 60)
    assert row.validation_min == pytest.approx(4 * row.val_pass_s / 60)
    assert row.ratio_to_target == pytest.approx(row.total_min)
    assert "1-minute target" in capsys.readouterr().out
    total_gflop = 40 * row.step_gflop + 4 * row.val_pass_gflop + row.test_pass_gflop
    assert row.total_tflop == pytest.approx(total_gflop / 1e3)
    assert row.floor_min == pytest.approx(total_gflop / (row.gemm_gflops * row.cores) / 60)
    assert 0 < frame.step_gflop[0] < frame.step_gflop[1]  # llops's sketches add matmuls to linear's
    assert row.cpu_gflops == pytest.approx(row.step_gflop / row.cpu_step_s)


def test_flop_counter_counts_matmuls_and_softmax_attention_on_the_cpu():
    q, k, v = (torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3))
    with counter() as flops:
        torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward()
    forward = 2 * (2 * 2 * 3 * 16 * 16 * 8)  # q k^T and p v
    assert flops.get_total_flops() == forward + 5 * forward // 2  # backward: q k^T again, dV, dP, dQ, dK
    with counter() as flops:
        torch.randn(5, 7) @ torch.randn(7, 11)
    assert flops.get_total_flops() == 2 * 5 * 7 * 11


def test_run_estimate_refuses_an_untimed_schedule():
    with pytest.raises(SystemExit):
        run_estimate.main(["--warmup", "0"])
